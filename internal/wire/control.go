package wire

import (
	"fmt"
	"slices"
)

// The controller's messages: where paths live, shares, users, ACLs.

// ResolveReq asks the controller where a global path lives and for a token.
type ResolveReq struct {
	Path string `cbor:"1,keyasint"`
	// Proxy names a share that may present the token on the caller's
	// behalf (for a third-party transfer from that share).
	Proxy string `cbor:"2,keyasint,omitempty"`
	// For names the user a gateway asks the token for (a gateway only):
	// the token is that user's, with the user's rights, and the gateway
	// may present it.
	For string `cbor:"3,keyasint,omitempty"`
	// Assertion, from a principal of a linked domain, is its home
	// domain's signed word on who it is and its groups
	// (OpDomainAssert); the controller of the data decides with it.
	Assertion []byte `cbor:"4,keyasint,omitempty"`
	// Bearer is a JWT a gateway was given (a gateway only, without For):
	// the controller verifies it again and signs a token for its
	// principal with the rights its scopes cover (and, for a token of
	// the domain's own, that the user's ACLs grant too).
	Bearer string `cbor:"5,keyasint,omitempty"`
}

// ResolveResp maps a global path to a share. If the path is above every
// mount (a synthetic directory such as "/uva"), Share is empty and Children
// lists the names below it.
type ResolveResp struct {
	Prefix    string   `cbor:"1,keyasint"` // the mount prefix that matched
	Share     string   `cbor:"2,keyasint"`
	SharePath string   `cbor:"3,keyasint"` // share-relative path of Prefix
	Addrs     []string `cbor:"4,keyasint"` // where to dial the share
	Token     []byte   `cbor:"5,keyasint"` // signed token for Prefix
	Expires   int64    `cbor:"6,keyasint"` // token expiry, unix nanoseconds
	Children  []string `cbor:"7,keyasint,omitempty"`
}

// MountEntry is one row of the mount table: a global prefix and the
// locations that hold its files. The primary location (the share that is
// read and written) is in Share and SharePath, the keys every agent has
// always read; More lists further locations in key 4, which agents older
// than it ignore (they see the entry as before). Locations returns all of
// them, the primary first.
type MountEntry struct {
	Prefix    string     `cbor:"1,keyasint"` // global, "/<domain>/..."
	Share     string     `cbor:"2,keyasint"`
	SharePath string     `cbor:"3,keyasint"`
	More      []Location `cbor:"4,keyasint,omitempty"`
}

// Locations returns the entry's locations, the primary first.
func (m MountEntry) Locations() []Location {
	out := make([]Location, 0, 1+len(m.More))
	out = append(out, Location{Share: m.Share, SharePath: m.SharePath, Kind: LocPrimary})
	return append(out, m.More...)
}

// Equal reports whether two entries are the same, locations included.
func (m MountEntry) Equal(o MountEntry) bool {
	return m.Prefix == o.Prefix && m.Share == o.Share && m.SharePath == o.SharePath && slices.Equal(m.More, o.More)
}

// MountLocationsMax is the most locations (the primary included) one
// mount-table entry may name.
const MountLocationsMax = 16

// Location is one place a mount's files are found: a share and the
// share-relative path (no leading or trailing slash; "" for the share's
// root) that stands for the mount's prefix, and what the place is.
type Location struct {
	Share     string       `cbor:"1,keyasint"`
	SharePath string       `cbor:"2,keyasint,omitempty"`
	Kind      LocationKind `cbor:"3,keyasint"`
}

// LocationKind says what a location of a mount is. Zero is no kind: a
// location must say what it is.
type LocationKind uint8

// Kinds of location. Only the primary is read and written today; the
// controller stores replicas (for clients that will read from the nearest
// copy) and refuses other domains until domains can be linked.
const (
	// LocPrimary is the share that holds the files and takes writes. It
	// is always the entry's first location (MountEntry.Share, SharePath)
	// and never appears in MountEntry.More.
	LocPrimary LocationKind = 1
	// LocReplica is a read-only copy of the primary kept at another share.
	LocReplica LocationKind = 2
	// LocDomain is another domain's namespace: Share names the domain and
	// SharePath the path below it.
	LocDomain LocationKind = 3
)

// String names the kind as `pando ns ls` prints it.
func (k LocationKind) String() string {
	switch k {
	case LocPrimary:
		return "primary"
	case LocReplica:
		return "replica"
	case LocDomain:
		return "domain"
	}
	return fmt.Sprintf("kind-%d", uint8(k))
}

// MountListResp lists the mount table.
type MountListResp struct {
	Domain  string       `cbor:"1,keyasint"`
	Entries []MountEntry `cbor:"2,keyasint"`
	// Controllers are the domain's live controllers, the answering one
	// first: clients keep their list of controllers up to date with it.
	Controllers []string `cbor:"3,keyasint,omitempty"`
}

// ShareRegisterReq registers (or re-registers) a share and asks for its
// certificate. CSR may be empty when the share already holds a certificate
// (then the caller must be that share).
type ShareRegisterReq struct {
	Name  string   `cbor:"1,keyasint"`
	Addrs []string `cbor:"2,keyasint"`
	CSR   []byte   `cbor:"3,keyasint,omitempty"`
}

// ShareRegisterResp gives the share what it needs to serve offline.
type ShareRegisterResp struct {
	Cert     []byte `cbor:"1,keyasint,omitempty"`
	CA       []byte `cbor:"2,keyasint"`
	TokenKey []byte `cbor:"3,keyasint"` // ed25519 public key
	Domain   string `cbor:"4,keyasint"`
}

// ShareInfo describes a registered share.
type ShareInfo struct {
	Name     string   `cbor:"1,keyasint"`
	Addrs    []string `cbor:"2,keyasint"`
	Online   bool     `cbor:"3,keyasint"`
	LastSeen int64    `cbor:"4,keyasint"`
}

// StatusResp is the domain's health as one controller sees it.
type StatusResp struct {
	Controllers []ControllerInfo `cbor:"1,keyasint"`
	StoreKind   string           `cbor:"2,keyasint"` // "bbolt" or "etcd"
	Store       []StoreMember    `cbor:"3,keyasint,omitempty"`
	StoreErr    string           `cbor:"4,keyasint,omitempty"`
	Shares      []ShareInfo      `cbor:"5,keyasint,omitempty"`
}

// ControllerInfo is one controller of the domain.
type ControllerInfo struct {
	Addr     string `cbor:"1,keyasint"`
	LastSeen int64  `cbor:"2,keyasint"` // its last heartbeat, unix nanoseconds
	Live     bool   `cbor:"3,keyasint"`
}

// StoreMember is one member of the store's cluster.
type StoreMember struct {
	Name   string `cbor:"1,keyasint"`
	Addr   string `cbor:"2,keyasint"`
	Leader bool   `cbor:"3,keyasint,omitempty"`
	Up     bool   `cbor:"4,keyasint,omitempty"`
	Err    string `cbor:"5,keyasint,omitempty"`
}

// ShareListResp lists shares.
type ShareListResp struct {
	Shares []ShareInfo `cbor:"1,keyasint"`
}

// ACLGetReq asks for the ACLs on a path (OpACLGet); its first fields are
// PathReq's. For, from a gateway only, names the user whose effective
// rights are asked for (see ResolveReq.For).
type ACLGetReq struct {
	Tok  uint32 `cbor:"1,keyasint"`
	Path string `cbor:"2,keyasint"`
	For  string `cbor:"3,keyasint,omitempty"`
}

// UserAddReq creates a user (and their credentials).
type UserAddReq struct {
	Name   string   `cbor:"1,keyasint"`
	Groups []string `cbor:"2,keyasint,omitempty"`
	CSR    []byte   `cbor:"3,keyasint,omitempty"` // if empty, the controller makes the key
	// Gateway makes a gateway's credentials (role gateway) instead.
	Gateway bool `cbor:"4,keyasint,omitempty"`
}

// UserAddResp returns the new user's credentials.
type UserAddResp struct {
	Cert []byte `cbor:"1,keyasint"`
	Key  []byte `cbor:"2,keyasint,omitempty"`
	CA   []byte `cbor:"3,keyasint"`
	// Controllers are the domain's live controllers, for the bundle.
	Controllers []string `cbor:"4,keyasint,omitempty"`
}

// UserInfo describes a user.
type UserInfo struct {
	Name    string   `cbor:"1,keyasint"`
	Groups  []string `cbor:"2,keyasint,omitempty"`
	Created int64    `cbor:"3,keyasint"`
	Revoked int64    `cbor:"4,keyasint,omitempty"`
	Gateway bool     `cbor:"5,keyasint,omitempty"`
}

// UserListResp lists users.
type UserListResp struct {
	Users []UserInfo `cbor:"1,keyasint"`
}

// UserRevokeReq revokes a user's certificates and tokens.
type UserRevokeReq struct {
	Name string `cbor:"1,keyasint"`
}

// ACLEntry is one line of an ACL; Who is "alice", "group:staff" or "anyone".
type ACLEntry struct {
	Who      string `cbor:"1,keyasint"`
	Rights   string `cbor:"2,keyasint"`
	Negative bool   `cbor:"3,keyasint,omitempty"`
}

// ACLResp returns the ACL set on a prefix and the caller's effective rights there.
type ACLResp struct {
	Path      string     `cbor:"1,keyasint"`
	Entries   []ACLEntry `cbor:"2,keyasint"`
	Effective string     `cbor:"3,keyasint"`
	// Inherited lists the ACLs of the prefixes above Path that also apply.
	Inherited map[string][]ACLEntry `cbor:"4,keyasint,omitempty"`
}

// ACLSetReq changes one entry of the ACL on Path (Rights "none" removes it),
// or replaces the whole ACL when Replace is set.
type ACLSetReq struct {
	Path    string     `cbor:"1,keyasint"`
	Entries []ACLEntry `cbor:"2,keyasint"`
	Replace bool       `cbor:"3,keyasint,omitempty"`
}

// Revocation is pushed to shares on OpWatch: tokens of Principal issued
// before Before (unix nanoseconds) are void, and so are certificates with the
// listed serials. An empty Principal with Before set voids every token
// issued before it (an ACL change).
type Revocation struct {
	Principal string   `cbor:"1,keyasint,omitempty"`
	Before    int64    `cbor:"2,keyasint"`
	Serials   []string `cbor:"3,keyasint,omitempty"`
	// Domain voids every connection and token of a principal of that
	// linked domain (it was unlinked).
	Domain string `cbor:"4,keyasint,omitempty"`
	// Trusted, with TrustSet, is the whole set of linked domains whose
	// certificates a share accepts now (sent when a watch begins and
	// whenever a link changes).
	Trusted  []TrustedDomain `cbor:"5,keyasint,omitempty"`
	TrustSet bool            `cbor:"6,keyasint,omitempty"`
}

// Marker reports whether r is the watch's end-of-sync marker (nothing to
// revoke, no trust set).
func (r Revocation) Marker() bool {
	return r.Before == 0 && r.Principal == "" && len(r.Serials) == 0 && r.Domain == "" && !r.TrustSet
}

// WhoAmIResp tells a client who the controller thinks it is.
type WhoAmIResp struct {
	Principal string   `cbor:"1,keyasint"`
	Domain    string   `cbor:"2,keyasint"`
	Groups    []string `cbor:"3,keyasint,omitempty"`
	// Now is the controller's clock when it answered, unix nanoseconds
	// (0 from controllers before it was added): pando doctor compares it
	// with the client's to find clock skew.
	Now int64 `cbor:"4,keyasint,omitempty"`
}

// TokenCreateReq asks the controller for a sign-in token of the caller's
// (a user): a bearer token that gateways take instead of a certificate or
// a password, for TTL nanoseconds (0: the default, 8 hours; at most 30
// days). It grants nothing at a share.
//
// With Scopes (storage.read:/uva/data and the like), the token is a JWT
// of the WLCG profile instead (TokenCreateResp.JWT), signed by the
// domain's JWT key for Audience ("": the domain's own, pando://DOMAIN).
type TokenCreateReq struct {
	TTL      int64    `cbor:"1,keyasint,omitempty"`
	Scopes   []string `cbor:"2,keyasint,omitempty"`
	Audience string   `cbor:"3,keyasint,omitempty"`
}

// TokenCreateResp is the sign-in token, and when it expires (unix
// nanoseconds).
type TokenCreateResp struct {
	Token   []byte `cbor:"1,keyasint"`
	Expires int64  `cbor:"2,keyasint"`
	JWT     string `cbor:"3,keyasint,omitempty"` // the JWT asked for with scopes (Token is then empty)
}

// BearerCheckReq asks the controller, for a gateway, whose JWT Token is.
type BearerCheckReq struct {
	Token string `cbor:"1,keyasint"`
}

// BearerCheckResp names the principal of a valid JWT (alice@uva for a
// token of the domain's own, SUB@ISSUER for a trusted issuer's), the
// home user it acts as ("" for another issuer's), its storage scopes
// (global paths) and when it expires (unix nanoseconds).
type BearerCheckResp struct {
	Principal string   `cbor:"1,keyasint"`
	User      string   `cbor:"2,keyasint,omitempty"`
	Scopes    []string `cbor:"3,keyasint,omitempty"`
	Expires   int64    `cbor:"4,keyasint"`
}

// IssuerInfo is an issuer of JWTs the domain trusts (pando domain
// trust-issuer): its name in principals (SUB@NAME), its iss, the
// audience its tokens must carry, the global path its scopes are
// relative to, and its key set (JWKS JSON).
type IssuerInfo struct {
	Name     string `cbor:"1,keyasint"`
	Issuer   string `cbor:"2,keyasint"`
	Audience string `cbor:"3,keyasint"`
	Base     string `cbor:"4,keyasint"`
	JWKS     []byte `cbor:"5,keyasint"`
	Added    int64  `cbor:"6,keyasint,omitempty"`
}

// IssuerListResp lists the issuers trusted, by name.
type IssuerListResp struct {
	Issuers []IssuerInfo `cbor:"1,keyasint"`
}

// IssuerDistrustReq ends the trust in an issuer, named by its name or iss.
type IssuerDistrustReq struct {
	Name string `cbor:"1,keyasint"`
}

// DomainJWKSResp is the domain's own issuer (iss), the audience its own
// JWTs must carry, and the key set that verifies them.
type DomainJWKSResp struct {
	Issuer   string `cbor:"1,keyasint"`
	Audience string `cbor:"2,keyasint"`
	JWKS     []byte `cbor:"3,keyasint"`
}

// TokenCheckReq asks the controller, for a gateway, whose sign-in token
// Token is.
type TokenCheckReq struct {
	Token []byte `cbor:"1,keyasint"`
}

// TokenCheckResp names the user of a valid sign-in token, and when it
// expires (unix nanoseconds).
type TokenCheckResp struct {
	User    string `cbor:"1,keyasint"`
	Expires int64  `cbor:"2,keyasint"`
}

// UserPasswdReq sets the gateway password of user Name ("": the caller),
// or (OpPasswordCheck) asks whether Password is it.
type UserPasswdReq struct {
	Name     string `cbor:"1,keyasint,omitempty"`
	Password string `cbor:"2,keyasint"`
}

// MaxPassword bounds a password's length.
const MaxPassword = 1024

// S3KeyReq asks for a new S3 access key of user Name ("": the caller), or
// (OpS3KeyGet) for the user and secret of the access key Access.
type S3KeyReq struct {
	Name   string `cbor:"1,keyasint,omitempty"`
	Access string `cbor:"2,keyasint,omitempty"`
}

// S3KeyResp is an S3 access key, its secret and its user.
type S3KeyResp struct {
	Access string `cbor:"1,keyasint"`
	Secret string `cbor:"2,keyasint"`
	User   string `cbor:"3,keyasint"`
}
