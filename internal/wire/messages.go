package wire

import (
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// Op names an operation. Share operations are 1..99, controller operations
// 100..199. Numbers are part of the protocol: never reuse one.
type Op uint16

// Share operations. Paths are share-relative ("" is the share root, "a/b"
// otherwise) and checked by the share; every request carries Tok, the
// session slot of a token installed with OpAuth.
const (
	OpAuth     Op = 1  // AuthReq -> AuthResp
	OpGetAttr  Op = 2  // PathReq -> AttrResp
	OpReadDir  Op = 3  // ReadDirReq -> ReadDirResp (+ data: small files' contents)
	OpOpen     Op = 4  // OpenReq -> OpenResp
	OpCreate   Op = 5  // OpenReq (with Mode) -> OpenResp
	OpRead     Op = 6  // ReadReq -> ReadResp + data
	OpWrite    Op = 7  // WriteReq + data -> WriteResp
	OpClose    Op = 8  // HandleReq -> Empty
	OpTruncate Op = 9  // TruncateReq -> AttrResp
	OpRename   Op = 10 // RenameReq -> Empty
	OpUnlink   Op = 11 // PathReq -> Empty
	OpMkdir    Op = 12 // MkdirReq -> AttrResp
	OpRmdir    Op = 13 // PathReq -> Empty
	OpSymlink  Op = 14 // SymlinkReq -> AttrResp
	OpReadlink Op = 15 // PathReq -> ReadlinkResp
	OpLink     Op = 16 // RenameReq (Old = existing, New = new name) -> AttrResp
	OpSetAttr  Op = 17 // SetAttrReq -> AttrResp
	OpFsync    Op = 18 // HandleReq -> Empty
	OpStatFS   Op = 19 // PathReq -> StatFSResp
	OpPing     Op = 20 // Empty -> Empty
	OpFGetAttr Op = 21 // HandleReq -> AttrResp (attributes of an open file, also after unlink)

	// Extended attributes of the user namespace (see xattr.go).
	OpGetXattr    Op = 22 // XattrReq -> XattrResp
	OpListXattr   Op = 23 // PathReq -> ListXattrResp
	OpSetXattr    Op = 24 // SetXattrReq -> AttrResp
	OpRemoveXattr Op = 25 // XattrReq -> AttrResp

	OpLock Op = 26 // LockReq -> LockResp: a byte-range lock on an open file (see lock.go)

	// OpMknod creates a special file, a FIFO or a socket, or an empty
	// regular file: MknodReq -> AttrResp.
	OpMknod Op = 27
)

// Transfer operations (40..59).
const (
	OpSum     Op = 40 // SumReq -> SumResp: CRC32C of each block of an open file, computed at the share
	OpGetFile Op = 41 // GetFileReq -> GetFileResp + data: a whole small file in one round trip
	OpPutFile Op = 42 // PutFileReq + data -> AttrResp: create or replace a whole small file atomically
	OpPush    Op = 43 // PushReq -> PushResp: third-party transfer, this share writes to another
	OpTicket  Op = 44 // TicketReq -> TicketResp: open a data channel without TLS (safe or clear)
	// OpStage opens a stage for the file of a writable handle: a hidden
	// file at the share that takes writes meant for it, until OpCommit
	// applies them to the file at once (HandleReq -> OpenResp).
	OpStage Op = 45
	// OpCommit applies a stage to its file, or fails leaving the file as
	// it was (CommitReq -> AttrResp). See CommitReq.
	OpCommit Op = 46
)

// Consistency operations (60..79).
const (
	OpGetInv Op = 60 // GetInvReq -> GetInvResp: invalidation polling
	// OpDelegReturn gives back (part of) a write delegation the share
	// recalled: DelegReturnReq -> Empty.
	OpDelegReturn Op = 61
	// OpValidate asks a share which of the listings an agent holds
	// (persisted by an earlier run of the agent) are still what a readdir
	// would return: ValidateReq -> ValidateResp. One request makes a
	// restarted agent's cache of a share fresh again, instead of a
	// listing per directory.
	OpValidate Op = 62
)

// Controller operations.
const (
	OpResolve       Op = 100 // ResolveReq -> ResolveResp
	OpMountList     Op = 101 // Empty -> MountListResp
	OpMountAdd      Op = 102 // MountEntry -> Empty
	OpMountRemove   Op = 103 // PathReq (Path = prefix) -> Empty
	OpShareRegister Op = 104 // ShareRegisterReq -> ShareRegisterResp
	OpShareList     Op = 105 // Empty -> ShareListResp
	OpUserAdd       Op = 106 // UserAddReq -> UserAddResp
	OpUserList      Op = 107 // Empty -> UserListResp
	OpUserRevoke    Op = 108 // UserRevokeReq -> Empty
	OpACLGet        Op = 109 // ACLGetReq -> ACLResp
	OpACLSet        Op = 110 // ACLSetReq -> Empty
	OpWatch         Op = 111 // Empty -> stream of Notify(Revocation), shares only
	OpWhoAmI        Op = 112 // Empty -> WhoAmIResp
	OpStatus        Op = 113 // Empty -> StatusResp, administrators only
	OpMountWatch    Op = 114 // Empty -> stream of Notify(MountListResp): the table now, then each new one
	OpTokenCreate   Op = 115 // TokenCreateReq -> TokenCreateResp, users only
	OpTokenCheck    Op = 116 // TokenCheckReq -> TokenCheckResp, gateways only
	OpUserPasswd    Op = 117 // UserPasswdReq -> Empty, the user or an administrator
	OpPasswordCheck Op = 118 // UserPasswdReq -> Empty, gateways only
	OpS3KeyCreate   Op = 119 // S3KeyReq (Name) -> S3KeyResp, the user or an administrator
	OpS3KeyGet      Op = 120 // S3KeyReq (Access) -> S3KeyResp, gateways only

	// Bearer tokens (JWTs of the WLCG profile) and the issuers trusted.
	OpBearerCheck    Op = 130 // BearerCheckReq -> BearerCheckResp, gateways only
	OpIssuerTrust    Op = 131 // IssuerInfo -> Empty, administrators only
	OpIssuerList     Op = 132 // Empty -> IssuerListResp, administrators only
	OpIssuerDistrust Op = 133 // IssuerDistrustReq -> Empty, administrators only
	OpDomainJWKS     Op = 134 // Empty -> DomainJWKSResp, anyone of the domain
)

var opNames = map[Op]string{
	OpAuth: "auth", OpGetAttr: "getattr", OpReadDir: "readdir", OpOpen: "open", OpCreate: "create",
	OpRead: "read", OpWrite: "write", OpClose: "close", OpTruncate: "truncate", OpRename: "rename",
	OpUnlink: "unlink", OpMkdir: "mkdir", OpRmdir: "rmdir", OpSymlink: "symlink", OpReadlink: "readlink",
	OpLink: "link", OpSetAttr: "setattr", OpFsync: "fsync", OpStatFS: "statfs", OpPing: "ping", OpFGetAttr: "fgetattr",
	OpGetXattr: "getxattr", OpListXattr: "listxattr", OpSetXattr: "setxattr", OpRemoveXattr: "removexattr", OpLock: "lock", OpMknod: "mknod", OpGetInv: "getinv", OpDelegReturn: "delegreturn", OpValidate: "validate",
	OpSum: "sum", OpGetFile: "getfile", OpPutFile: "putfile", OpPush: "push", OpTicket: "ticket", OpStage: "stage", OpCommit: "commit",
	OpResolve: "resolve", OpMountList: "mount-list", OpMountAdd: "mount-add", OpMountRemove: "mount-remove",
	OpShareRegister: "share-register", OpShareList: "share-list", OpUserAdd: "user-add",
	OpUserList: "user-list", OpUserRevoke: "user-revoke", OpACLGet: "acl-get", OpACLSet: "acl-set",
	OpWatch: "watch", OpWhoAmI: "whoami", OpStatus: "status", OpMountWatch: "mount-watch",
	OpTokenCreate: "token-create", OpTokenCheck: "token-check",
	OpUserPasswd: "user-passwd", OpPasswordCheck: "password-check", OpS3KeyCreate: "s3-key-create", OpS3KeyGet: "s3-key-get",
	OpDomainLink: "domain-link", OpDomainUnlink: "domain-unlink", OpDomainList: "domain-list", OpDomainHello: "domain-hello",
	OpDomainInvite: "domain-invite", OpDomainJoin: "domain-join", OpDomainAssert: "domain-assert", OpCertRenew: "cert-renew",
	OpBearerCheck: "bearer-check", OpIssuerTrust: "issuer-trust", OpIssuerList: "issuer-list", OpIssuerDistrust: "issuer-distrust", OpDomainJWKS: "domain-jwks",
}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("op%d", uint16(o))
}

// Idempotent reports whether a request of this op may be sent again after a
// lost reply without changing the outcome. Only these are retried.
func (o Op) Idempotent() bool {
	switch o {
	case OpAuth, OpGetAttr, OpReadDir, OpRead, OpReadlink, OpStatFS, OpPing, OpFsync, OpFGetAttr, OpGetInv, OpDelegReturn, OpValidate,
		OpGetXattr, OpListXattr,
		OpSum, OpGetFile, OpPutFile, OpPush,
		OpResolve, OpMountList, OpShareList, OpUserList, OpACLGet, OpWhoAmI, OpStatus, OpTokenCheck, OpPasswordCheck, OpS3KeyGet,
		OpDomainList, OpDomainHello, OpDomainAssert,
		OpBearerCheck, OpIssuerList, OpDomainJWKS:
		return true
	}
	return false
}

// Empty is the message of requests and replies that carry nothing.
type Empty struct{}

// AuthReq installs a signed token in the session; the reply names the slot
// that later requests cite as Tok. Session, if set, names the agent's
// invalidation session: changes made through this connection are not
// reported back to it.
type AuthReq struct {
	Token   []byte `cbor:"1,keyasint"`
	Session string `cbor:"2,keyasint,omitempty"`
}

// GetInvReq polls the invalidations of a session since a stamp (GVFS's
// GETINV). Since 0 asks for a fresh start.
type GetInvReq struct {
	Tok     uint32 `cbor:"1,keyasint"`
	Session string `cbor:"2,keyasint"`
	Since   uint64 `cbor:"3,keyasint"`
	Max     uint32 `cbor:"4,keyasint"`
	// Wait (ns), for callback sessions: with nothing to report, the
	// share holds the request up to Wait (a heartbeat when it ends
	// empty). Such a request acknowledges every record up to Since, and
	// a change made through the share is not acknowledged to its maker
	// until every callback session has acknowledged it, or has gone
	// Lease (ns) without asking (and then trusts nothing it cached).
	Wait  int64 `cbor:"5,keyasint,omitempty"`
	Lease int64 `cbor:"6,keyasint,omitempty"`
}

// GetInvResp answers GetInvReq. Paths are share-relative and changed
// after Since (a changed directory's listing is invalid too). Force says
// that the agent must drop everything it caches of this share: its first
// poll, a buffer that overflowed, a share that restarted (Epoch changed).
// Again says the reply was cut at Max: poll again at once.
type GetInvResp struct {
	Paths []string `cbor:"1,keyasint"`
	Stamp uint64   `cbor:"2,keyasint"`
	Force bool     `cbor:"3,keyasint,omitempty"`
	Again bool     `cbor:"4,keyasint,omitempty"`
	Epoch uint64   `cbor:"5,keyasint"`
	// Recalls are the write delegations of this session the share wants
	// back (a conflicting access waits for them), with the range the
	// conflicting request needs first. Answer each with OpDelegReturn.
	Recalls []Recall `cbor:"6,keyasint,omitempty"`
}

// Recall asks for a write delegation back: Path is share-relative; the
// bytes [Off, Off+Len) are wanted first (Len 0: nothing in particular).
type Recall struct {
	Path string `cbor:"1,keyasint"`
	Off  int64  `cbor:"2,keyasint"`
	Len  int64  `cbor:"3,keyasint"`
	ID   uint64 `cbor:"4,keyasint,omitempty"` // the delegation recalled (OpenResp.DelegID)
}

// DelegReturnReq returns a write delegation the share recalled, in one or
// two steps: first, once the wanted range and the file's final size are at
// the share, with the ranges still to come (Pending); then with Done, once
// everything is written. Requests of other agents that need none of the
// pending bytes go ahead after the first step.
//
// A holder that cannot write its data back answers the recall with the
// failure instead (Code set; Pending and Done are then ignored): the
// share keeps the delegation, and fails the requests waiting for it, and
// those that come until the holder returns it, with Code (ENOSPC or EIO)
// and a message naming the file and Message, the holder's reason (at most
// MaxReturnMessage bytes). The share recalls it again as usual.
type DelegReturnReq struct {
	Tok     uint32      `cbor:"1,keyasint"`
	Session string      `cbor:"2,keyasint"`
	Path    string      `cbor:"3,keyasint"`
	Pending []ByteRange `cbor:"4,keyasint,omitempty"`
	Done    bool        `cbor:"5,keyasint,omitempty"`
	Code    Code        `cbor:"6,keyasint,omitempty"`
	Message string      `cbor:"7,keyasint,omitempty"`
	// ID names the delegation returned (OpenResp.DelegID): a return of
	// one the share has taken back already (answered twice, or sent
	// late) leaves a later delegation of the same file alone. 0 returns
	// whichever the session holds on Path.
	ID uint64 `cbor:"8,keyasint,omitempty"`
}

// MaxReturnMessage bounds DelegReturnReq.Message.
const MaxReturnMessage = 512

// ByteRange is Len bytes at Off.
type ByteRange struct {
	Off int64 `cbor:"1,keyasint"`
	Len int64 `cbor:"2,keyasint"`
}

// AuthResp answers AuthReq.
type AuthResp struct {
	Tok     uint32 `cbor:"1,keyasint"`
	Expires int64  `cbor:"2,keyasint"` // unix nanoseconds
}

// PathReq names one path.
type PathReq struct {
	Tok  uint32 `cbor:"1,keyasint"`
	Path string `cbor:"2,keyasint"`
}

// Attr is a file's attributes as the share sees them. Version is the change
// counter: it grows whenever the file's data or attributes change, through
// pando or by a program at the share, and is what caches validate against.
type Attr struct {
	Ino     uint64 `cbor:"1,keyasint"`
	Mode    uint32 `cbor:"2,keyasint"` // Unix type and permission bits (S_IFMT | 07777)
	Nlink   uint32 `cbor:"3,keyasint"`
	Size    int64  `cbor:"4,keyasint"`
	Blocks  int64  `cbor:"5,keyasint"` // 512-byte blocks allocated
	Atime   int64  `cbor:"6,keyasint"` // unix nanoseconds
	Mtime   int64  `cbor:"7,keyasint"`
	Ctime   int64  `cbor:"8,keyasint"`
	Version uint64 `cbor:"9,keyasint"`
	// Rdev is a device's number (only for S_IFCHR and S_IFBLK).
	Rdev uint64 `cbor:"10,keyasint,omitempty"`
	// Owner and Group are who owns the entry, as the share keeps them
	// (see Ident): a principal ("alice@uva") or a grid group, or "#N",
	// a local id with no name in the grid. Empty when the share keeps
	// none for the entry (a file made at the share's host).
	Owner string `cbor:"11,keyasint,omitempty"`
	Group string `cbor:"12,keyasint,omitempty"`
}

// AttrResp carries one Attr.
type AttrResp struct {
	Attr Attr `cbor:"1,keyasint"`
	// Prior, in a setattr reply that changed neither size nor mtime, is
	// the file's version just before the change when its contents did not
	// change meanwhile (same size and mtime): a client whose cache holds
	// that version may take the new one for its bytes.
	Prior uint64 `cbor:"2,keyasint,omitempty"`
}

// ReadDirReq lists a directory. Its first fields are PathReq's, so that a
// share that does not know the others reads it as a plain listing.
// DataMax > 0 asks for the whole content of the small regular files
// listed, those of at most DataMax bytes, up to DataBudget bytes in all,
// with the listing (see DirEntry.Data): a client whose cache the share
// keeps valid by invalidations (poll, callback) then reads them with no
// round trip.
type ReadDirReq struct {
	Tok        uint32 `cbor:"1,keyasint"`
	Path       string `cbor:"2,keyasint"`
	DataMax    uint32 `cbor:"3,keyasint,omitempty"`
	DataBudget uint32 `cbor:"4,keyasint,omitempty"`
	// After asks for the names that sort (bytewise) after this one: the
	// last name of the page before. A name is a cookie that stays valid
	// while the directory changes.
	After string `cbor:"5,keyasint,omitempty"`
	// Max bounds the entries of the page (0: the share's page size).
	Max uint32 `cbor:"6,keyasint,omitempty"`
}

// DirEntry is one name in a directory listing, with its attributes so that a
// listing costs one round trip (readdirplus).
type DirEntry struct {
	Name string `cbor:"1,keyasint"`
	Attr Attr   `cbor:"2,keyasint"`
	// Data: the reply's data part holds this file's whole content, the
	// Attr.Size bytes of the version Attr names, right after those of the
	// entries before it that have Data (in the order of Entries).
	Data bool `cbor:"3,keyasint,omitempty"`
}

// ReadDirResp lists a directory.
type ReadDirResp struct {
	Entries []DirEntry `cbor:"1,keyasint"` // in bytewise order of Name
	Dir     Attr       `cbor:"2,keyasint"`
	// More says that names after the last entry follow: ask again with
	// After set to it.
	More bool `cbor:"3,keyasint,omitempty"`
}

// ReadDirPage is the most entries a share puts in one page of a listing:
// with names of 255 bytes, well under MaxMeta.
const ReadDirPage = 2048

// Open flags, a portable subset of open(2).
const (
	OpenRead   uint32 = 1 << 0
	OpenWrite  uint32 = 1 << 1
	OpenAppend uint32 = 1 << 2
	OpenTrunc  uint32 = 1 << 3
	OpenExcl   uint32 = 1 << 4 // with OpCreate: fail if the file exists
	// OpenFollow follows a final symlink (inside the share only). Without
	// it, opening a symlink fails with ELOOP, as FUSE clients resolve
	// links themselves.
	OpenFollow uint32 = 1 << 5
	// OpenDeleg asks for a write delegation with a writable open, for a
	// callback session: granted when no other agent has the file open,
	// it lets the agent keep writes to itself until the share recalls it
	// (OpenResp.Deleg says whether it was granted).
	OpenDeleg uint32 = 1 << 6
	// OpenReclaim, with OpenDeleg, reclaims a delegation held before the
	// share restarted, within its grace period.
	OpenReclaim uint32 = 1 << 7
)

// OpenReq opens (or, with OpCreate, creates) a file.
type OpenReq struct {
	Tok   uint32 `cbor:"1,keyasint"`
	Path  string `cbor:"2,keyasint"`
	Flags uint32 `cbor:"3,keyasint"`
	Mode  uint32 `cbor:"4,keyasint"` // permission bits for OpCreate
	// First asks for up to First bytes from the start of the file with the
	// open, as the reply's data (a cold read of a small file in one round
	// trip). Only for a handle that can read.
	First uint32 `cbor:"5,keyasint,omitempty"`
	// Owner and Group, with OpCreate, are the owner and group the new
	// file is given (see Ident); empty: the principal's, none.
	Owner string `cbor:"6,keyasint,omitempty"`
	Group string `cbor:"7,keyasint,omitempty"`
}

// OpenResp returns a handle valid on every channel of the same session.
type OpenResp struct {
	Handle uint64 `cbor:"1,keyasint"`
	Attr   Attr   `cbor:"2,keyasint"`
	Deleg  bool   `cbor:"3,keyasint,omitempty"` // a write delegation was granted
	EOF    bool   `cbor:"4,keyasint,omitempty"` // the data asked for by First reaches the end of the file
	// Ranges (OpStage with a name): what the stage holds already, sorted
	// and disjoint (none for a stage made by this request).
	Ranges []ByteRange `cbor:"5,keyasint,omitempty"`
	// DelegID names the write delegation granted (Deleg): a recall of it
	// and its return carry it, so that neither is taken for another
	// delegation of the same file granted later (NFSv4's stateid).
	DelegID uint64 `cbor:"6,keyasint,omitempty"`
}

// HandleReq names an open handle.
type HandleReq struct {
	Tok    uint32 `cbor:"1,keyasint"`
	Handle uint64 `cbor:"2,keyasint"`
	// Name (OpStage only) asks for a named stage: made if the principal
	// has none of that name, else attached again, so that it outlives
	// the handle, the connection and the client's restart (at most
	// MaxStageName bytes of letters, digits, '.', '_' and '-').
	Name string `cbor:"3,keyasint,omitempty"`
	// Keep (OpClose of a named stage's handle only) keeps the stage at
	// the share for a later attach; without it the stage is thrown away.
	Keep bool `cbor:"4,keyasint,omitempty"`
}

// MaxStageName is the longest stage name (HandleReq.Name).
const MaxStageName = 64

// ReadReq reads Length bytes at Offset; the reply's data part holds them
// (shorter at end of file).
type ReadReq struct {
	Tok    uint32 `cbor:"1,keyasint"`
	Handle uint64 `cbor:"2,keyasint"`
	Offset int64  `cbor:"3,keyasint"`
	Length uint32 `cbor:"4,keyasint"`
}

// ReadResp answers ReadReq; EOF is set when the read reached end of file.
type ReadResp struct {
	EOF bool `cbor:"1,keyasint"`
	// Attr is the file's attributes as the share read it (zero from
	// older shares): a reader caching by version sees at once that the
	// bytes belong to a newer version than the one it cached.
	Attr Attr `cbor:"2,keyasint,omitempty"`
}

// WriteReq writes the frame's data part at Offset (ignored for append handles).
type WriteReq struct {
	Tok    uint32 `cbor:"1,keyasint"`
	Handle uint64 `cbor:"2,keyasint"`
	Offset int64  `cbor:"3,keyasint"`
	// Sum, if set, is the CRC32C the data had where it was read (its
	// source): the share writes nothing unless the data still matches.
	Sum *uint32 `cbor:"4,keyasint,omitempty"`
}

// WriteResp answers WriteReq.
type WriteResp struct {
	N    uint32 `cbor:"1,keyasint"`
	Attr Attr   `cbor:"2,keyasint"`
}

// TruncateReq sets a file's size, by open handle if Handle is not zero.
type TruncateReq struct {
	Tok    uint32 `cbor:"1,keyasint"`
	Path   string `cbor:"2,keyasint"`
	Handle uint64 `cbor:"3,keyasint"`
	Size   int64  `cbor:"4,keyasint"`
}

// RenameReq moves Old to New (for OpLink: links New to Old).
type RenameReq struct {
	Tok uint32 `cbor:"1,keyasint"`
	Old string `cbor:"2,keyasint"`
	New string `cbor:"3,keyasint"`
	// NoReplace fails with EEXIST when New exists (RENAME_NOREPLACE).
	NoReplace bool `cbor:"4,keyasint,omitempty"`
}

// MkdirReq creates a directory.
type MkdirReq struct {
	Tok  uint32 `cbor:"1,keyasint"`
	Path string `cbor:"2,keyasint"`
	Mode uint32 `cbor:"3,keyasint"`
	// Owner and Group as in OpenReq.
	Owner string `cbor:"4,keyasint,omitempty"`
	Group string `cbor:"5,keyasint,omitempty"`
}

// MknodReq creates Path as a FIFO (S_IFIFO), a socket (S_IFSOCK), a
// character or block device (S_IFCHR, S_IFBLK: kept by the share as a
// record, never as a device node, see docs/posix.md) or an empty regular
// file (S_IFREG), as Mode's type bits say, with Mode's permission bits.
type MknodReq struct {
	Tok  uint32 `cbor:"1,keyasint"`
	Path string `cbor:"2,keyasint"`
	Mode uint32 `cbor:"3,keyasint"`
	Rdev uint32 `cbor:"4,keyasint,omitempty"` // a device's number
	// Owner and Group as in OpenReq.
	Owner string `cbor:"5,keyasint,omitempty"`
	Group string `cbor:"6,keyasint,omitempty"`
}

// SymlinkReq creates Path pointing at Target. The target is stored as given;
// the share never follows a link that leaves its root.
type SymlinkReq struct {
	Tok    uint32 `cbor:"1,keyasint"`
	Path   string `cbor:"2,keyasint"`
	Target string `cbor:"3,keyasint"`
	// Owner and Group as in OpenReq.
	Owner string `cbor:"4,keyasint,omitempty"`
	Group string `cbor:"5,keyasint,omitempty"`
}

// ReadlinkResp answers OpReadlink.
type ReadlinkResp struct {
	Target string `cbor:"1,keyasint"`
}

// SetAttr fields; a field is applied only when its bit is set in Valid.
const (
	SetMode  uint32 = 1 << 0
	SetAtime uint32 = 1 << 1
	SetMtime uint32 = 1 << 2
	SetSize  uint32 = 1 << 3
	SetOwner uint32 = 1 << 4 // chown: Owner (see Ident)
	SetGroup uint32 = 1 << 5 // chgrp: Group
)

// SetAttrReq changes permission bits, times or size.
type SetAttrReq struct {
	Tok   uint32 `cbor:"1,keyasint"`
	Path  string `cbor:"2,keyasint"`
	Valid uint32 `cbor:"3,keyasint"`
	Mode  uint32 `cbor:"4,keyasint"`
	Atime int64  `cbor:"5,keyasint"`
	Mtime int64  `cbor:"6,keyasint"`
	Size  int64  `cbor:"7,keyasint"`
	Owner string `cbor:"8,keyasint,omitempty"`
	Group string `cbor:"9,keyasint,omitempty"`
}

// StatFSResp describes the file system holding the share.
type StatFSResp struct {
	Blocks  uint64 `cbor:"1,keyasint"`
	Bfree   uint64 `cbor:"2,keyasint"`
	Bavail  uint64 `cbor:"3,keyasint"`
	Files   uint64 `cbor:"4,keyasint"`
	Ffree   uint64 `cbor:"5,keyasint"`
	Bsize   uint32 `cbor:"6,keyasint"`
	NameLen uint32 `cbor:"7,keyasint"`
}

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	encMode, err = cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err)
	}
	decMode, err = cbor.DecOptions{
		MaxNestedLevels:  16,
		MaxArrayElements: 1 << 20,
		MaxMapPairs:      1 << 16,
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		IndefLength:      cbor.IndefLengthForbidden,
		TagsMd:           cbor.TagsForbidden,
	}.DecMode()
	if err != nil {
		panic(err)
	}
}

// Marshal encodes a message.
func Marshal(v any) ([]byte, error) { return encMode.Marshal(v) }

// Unmarshal decodes a message; any failure wraps ErrMalformed.
func Unmarshal(b []byte, v any) error {
	if err := decMode.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return nil
}
