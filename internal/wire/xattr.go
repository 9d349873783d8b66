package wire

import "strings"

// Extended attributes. Only the user namespace travels: security.*,
// system.* (POSIX ACLs), trusted.* and any other namespace mean something
// only on the share's machine (its LSM, its uids, its administrator), so
// they are neither shown nor set across organisations. Agents answer for
// them without asking (there are none; they cannot be set), and shares
// refuse them.

// XattrUser is the prefix of the names that travel.
const XattrUser = "user."

// Limits, those of Linux: a name of at most 255 bytes, a value of at most
// 64 KiB, a list of names of at most 64 KiB (each name with its NUL). A
// value travels in the meta part, well within MaxMeta.
const (
	XattrNameMax  = 255
	XattrValueMax = 64 << 10
	XattrListMax  = 64 << 10
)

// SetXattrReq flags, with the values of Linux's setxattr(2).
const (
	XattrCreate  uint32 = 1 // XATTR_CREATE: fail with EEXIST if the attribute exists
	XattrReplace uint32 = 2 // XATTR_REPLACE: fail with ENODATA if it does not
)

// CheckXattrFlags says what is wrong with setxattr flags, or returns nil.
func CheckXattrFlags(flags uint32) *Error {
	if flags != 0 && flags != XattrCreate && flags != XattrReplace {
		return Errorf(CodeInvalid, "setxattr flags %#x: give create or replace, or neither", flags)
	}
	return nil
}

// XattrShareMeta is the share's own attribute, in which it keeps what a
// client asked that its host's file may not have (a device, setuid and
// setgid bits; see docs/posix.md). It does not travel: a share neither
// shows it nor lets a client set or remove it.
const XattrShareMeta = "user.pando.meta"

// XattrShareOwner is the share's own attribute in which a share that
// does not run as root keeps an entry's owner and group (see
// Attr.Owner); it does not travel either.
const XattrShareOwner = "user.pando.owner"

// XattrTravels reports whether the extended attribute name belongs to
// the namespace the protocol carries.
func XattrTravels(name string) bool {
	return strings.HasPrefix(name, XattrUser) && name != XattrShareMeta && name != XattrShareOwner
}

// CheckXattrName says what is wrong with name as the name of an extended
// attribute that travels, or returns nil.
func CheckXattrName(name string) *Error {
	switch {
	case name == XattrShareMeta, name == XattrShareOwner:
		return Errorf(CodeNotSupp, "extended attribute %s is the share's own; choose another name", name)
	case !XattrTravels(name):
		return Errorf(CodeNotSupp, "extended attribute %q is not in the user namespace; only user.* attributes are carried", name)
	case len(name) == len(XattrUser), len(name) > XattrNameMax, strings.IndexByte(name, 0) >= 0:
		return Errorf(CodeInvalid, "%q is not a valid extended attribute name (user. followed by 1 to %d bytes, no NUL)", name, XattrNameMax-len(XattrUser))
	}
	return nil
}

// XattrReq names an extended attribute of Path (OpGetXattr,
// OpRemoveXattr). A final symlink is not followed.
type XattrReq struct {
	Tok  uint32 `cbor:"1,keyasint"`
	Path string `cbor:"2,keyasint"`
	Name string `cbor:"3,keyasint"`
}

// XattrResp carries the whole value of an attribute.
type XattrResp struct {
	Value []byte `cbor:"1,keyasint"`
}

// ListXattrResp lists the names of a file's user.* attributes.
type ListXattrResp struct {
	Names []string `cbor:"1,keyasint"`
}

// SetXattrReq sets the attribute Name of Path to Value (at most
// XattrValueMax bytes); Flags are XattrCreate or XattrReplace. The reply
// is the file's attributes after the change (its ctime moved on).
type SetXattrReq struct {
	Tok   uint32 `cbor:"1,keyasint"`
	Path  string `cbor:"2,keyasint"`
	Name  string `cbor:"3,keyasint"`
	Value []byte `cbor:"4,keyasint"`
	Flags uint32 `cbor:"5,keyasint,omitempty"`
}
