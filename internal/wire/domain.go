package wire

// Linked domains: a controller keeps a record of each domain it has linked
// with (its name, controllers, CA certificate, token key and what it
// admits), lists them to its clients and shares, and answers a stranger
// controller (one whose CA it does not know yet) only what linking needs.

// Controller operations of linked domains.
const (
	// OpDomainLink links (or relinks) a domain: DomainLinkReq -> DomainLink
	// (the link as stored), administrators only.
	OpDomainLink Op = 121
	// OpDomainUnlink ends a link at once: DomainNameReq -> Empty,
	// administrators only.
	OpDomainUnlink Op = 122
	// OpDomainList lists the home domain and its links: Empty ->
	// DomainListResp, the domain's users, gateways and shares.
	OpDomainList Op = 123
	// OpDomainHello is what a controller tells anyone (strangers
	// included) about its domain, for the caller to check against the
	// fingerprint it was given: Empty -> DomainHello.
	OpDomainHello Op = 124
	// OpDomainInvite makes a one-time invitation: DomainInviteReq ->
	// DomainInviteResp, administrators only.
	OpDomainInvite Op = 125
	// OpDomainJoin redeems an invitation, from the invited domain's
	// controller (a stranger until then): DomainJoinReq -> DomainHello.
	OpDomainJoin Op = 126
	// OpDomainAssert signs a group assertion for the caller (or, for a
	// gateway, the user it names) to present to a linked domain:
	// DomainAssertReq -> DomainAssertResp.
	OpDomainAssert Op = 127
)

// Admission of a linked domain's principals.
const (
	AdmitAll    = "all"    // every user of the linked domain
	AdmitNone   = "none"   // none: the link only lets this domain's principals reach it
	AdmitGroups = "groups" // the users of the named groups of the linked domain
)

// DomainLink is a linked domain as a controller keeps and lists it.
type DomainLink struct {
	Name        string   `cbor:"1,keyasint"`
	Controllers []string `cbor:"2,keyasint,omitempty"`
	CA          []byte   `cbor:"3,keyasint"`           // PEM of the linked domain's CA certificate
	TokenKey    []byte   `cbor:"4,keyasint,omitempty"` // its controllers' ed25519 public key (group assertions)
	Admit       string   `cbor:"5,keyasint"`           // AdmitAll, AdmitNone or AdmitGroups
	Groups      []string `cbor:"6,keyasint,omitempty"` // admitted groups (AdmitGroups)
	// Prefix bounds what the linked domain's principals may ever reach
	// in this domain's namespace ("" or "/": no bound beyond the ACLs).
	Prefix  string `cbor:"7,keyasint,omitempty"`
	Created int64  `cbor:"8,keyasint,omitempty"` // unix ns
	By      string `cbor:"9,keyasint,omitempty"` // who linked it
	// State, in listings: when the linked domain's controller last
	// answered this controller (unix ns, 0: never) and the last error.
	LastContact int64  `cbor:"10,keyasint,omitempty"`
	LastError   string `cbor:"11,keyasint,omitempty"`
}

// DomainLinkReq links a domain. With CA empty the controller dials
// Controllers, asks the domain's hello and checks its CA certificate
// against Fingerprint (hex SHA-256 of the certificate's DER).
type DomainLinkReq struct {
	Link        DomainLink `cbor:"1,keyasint"`
	Fingerprint string     `cbor:"2,keyasint,omitempty"`
	// Code, if set, is an invitation of the other domain (pando domain
	// invite) to redeem: it names the domain, its controllers and its
	// CA's fingerprint, which Link and Fingerprint then need not.
	Code string `cbor:"3,keyasint,omitempty"`
}

// DomainListReq asks for the links; with Probe, the controller asks each
// linked domain's controller first whether it answers.
type DomainListReq struct {
	Probe bool `cbor:"1,keyasint,omitempty"`
}

// DomainNameReq names a linked domain.
type DomainNameReq struct {
	Name string `cbor:"1,keyasint"`
}

// DomainListResp is the home domain and its links.
type DomainListResp struct {
	Home        string       `cbor:"1,keyasint"`
	Fingerprint string       `cbor:"2,keyasint"` // of the home CA
	Links       []DomainLink `cbor:"3,keyasint,omitempty"`
}

// DomainHello is what a controller tells anyone about its domain.
type DomainHello struct {
	Domain      string   `cbor:"1,keyasint"`
	Controllers []string `cbor:"2,keyasint,omitempty"`
	CA          []byte   `cbor:"3,keyasint"`
	TokenKey    []byte   `cbor:"4,keyasint"`
}

// DomainInviteReq asks for an invitation of the domain Name, to be admitted
// as Admit, Groups and Prefix say, usable once within TTL (ns).
type DomainInviteReq struct {
	Name   string   `cbor:"1,keyasint"`
	Admit  string   `cbor:"2,keyasint,omitempty"`
	Groups []string `cbor:"3,keyasint,omitempty"`
	Prefix string   `cbor:"4,keyasint,omitempty"`
	TTL    int64    `cbor:"5,keyasint,omitempty"`
}

// DomainInviteResp is the invitation's code (text to hand over) and when it
// expires (unix ns).
type DomainInviteResp struct {
	Code    string `cbor:"1,keyasint"`
	Expires int64  `cbor:"2,keyasint"`
}

// DomainJoinReq redeems an invitation: the invitation's secret and the
// joining domain's hello (its CA must have issued the caller's
// certificate).
type DomainJoinReq struct {
	Secret []byte      `cbor:"1,keyasint"`
	Hello  DomainHello `cbor:"2,keyasint"`
}

// DomainAssertReq asks for a group assertion to present to domain Domain;
// For names the user a gateway asks it for.
type DomainAssertReq struct {
	Domain string `cbor:"1,keyasint"`
	For    string `cbor:"2,keyasint,omitempty"`
}

// DomainAssertResp is a signed assertion (an auth.Token with Assert set)
// and its expiry (unix ns).
type DomainAssertResp struct {
	Assertion []byte `cbor:"1,keyasint"`
	Expires   int64  `cbor:"2,keyasint"`
}

// TrustedDomain is a linked domain as a share needs it: whose certificates
// it accepts.
type TrustedDomain struct {
	Name string `cbor:"1,keyasint"`
	CA   []byte `cbor:"2,keyasint"`
}

// OpCertRenew issues the caller (a user or gateway of the domain, not
// revoked) a new certificate of its identity for the key of a certificate
// request, before the one it holds expires: CertRenewReq ->
// CertRenewResp.
const OpCertRenew Op = 128

// CertRenewReq carries a PEM certificate request for the new key.
type CertRenewReq struct {
	CSR []byte `cbor:"1,keyasint"`
}

// CertRenewResp is the new certificate (PEM) and when it expires (unix ns).
type CertRenewResp struct {
	Cert    []byte `cbor:"1,keyasint"`
	Expires int64  `cbor:"2,keyasint"`
}
