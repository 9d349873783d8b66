package wire

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
)

// Code is an error code carried in TypeError frames. Values below 1000 are
// Linux errno numbers, so that edges (FUSE, NFS) can pass them through;
// 1000 and above are pando's own.
type Code uint32

// Error codes.
const (
	CodePerm        Code = Code(syscall.EPERM)
	CodeNotExist    Code = Code(syscall.ENOENT)
	CodeIO          Code = Code(syscall.EIO)
	CodeBadHandle   Code = Code(syscall.EBADF)
	CodeAccess      Code = Code(syscall.EACCES)
	CodeExist       Code = Code(syscall.EEXIST)
	CodeXDev        Code = Code(syscall.EXDEV)
	CodeNotDir      Code = Code(syscall.ENOTDIR)
	CodeIsDir       Code = Code(syscall.EISDIR)
	CodeInvalid     Code = Code(syscall.EINVAL)
	CodeFileTooBig  Code = Code(syscall.EFBIG)
	CodeNoSpace     Code = Code(syscall.ENOSPC)
	CodeReadOnly    Code = Code(syscall.EROFS)
	CodeTooManyLink Code = Code(syscall.EMLINK)
	CodeNameTooLong Code = Code(syscall.ENAMETOOLONG)
	CodeNotEmpty    Code = Code(syscall.ENOTEMPTY)
	CodeLoop        Code = Code(syscall.ELOOP)
	CodeNotSupp     Code = Code(syscall.EOPNOTSUPP)
	CodeQuota       Code = Code(syscall.EDQUOT)
	CodeStale       Code = Code(syscall.ESTALE)
	CodeRange       Code = Code(syscall.ERANGE)
	CodeNoData      Code = Code(syscall.ENODATA) // no such extended attribute (ENOATTR)
	CodeTooBig      Code = Code(syscall.E2BIG)   // an extended attribute's value over XattrValueMax
	CodeTooManyOpen Code = Code(syscall.EMFILE)  // a principal's limit on open files at a share
	CodeTableFull   Code = Code(syscall.ENFILE)  // a share's limit on open files of everyone
	CodeAgain       Code = Code(syscall.EAGAIN)  // a principal's limit on connections or requests in flight
	CodeNoBufs      Code = Code(syscall.ENOBUFS) // a principal's limit on write data in flight

	CodeMalformed     Code = 1000 // the request could not be decoded
	CodeTokenExpired  Code = 1001 // the token's lifetime is over: fetch a new one
	CodeTokenInvalid  Code = 1002 // bad signature, wrong share, wrong principal
	CodeTokenRevoked  Code = 1003 // revoked by the controller
	CodeNoToken       Code = 1004 // the Tok slot is not installed in this session
	CodeEscape        Code = 1005 // the path leaves the share's root
	CodeUnknownOp     Code = 1006
	CodeUnavailable   Code = 1007 // the server is shutting down or overloaded: retry elsewhere/later
	CodeNotRegistered Code = 1008 // unknown share / user
	CodeInternal      Code = 1009
	CodeCorrupt       Code = 1010 // data did not match its checksum: send it again
	CodeBusyRoot      Code = Code(syscall.EBUSY)
)

// Error is an error reported by a peer. It is also the message of TypeError
// frames.
type Error struct {
	Code    Code   `cbor:"1,keyasint"`
	Message string `cbor:"2,keyasint"`
	// Missing names the rights whose absence caused CodeAccess, if any.
	Missing string `cbor:"3,keyasint,omitempty"`
	// Paths lists the share-relative paths the message names (each as
	// "/" + path), so that a client can show them as global paths.
	Paths []string `cbor:"4,keyasint,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Errno returns the errno that best describes the error at a file system edge.
func (e *Error) Errno() syscall.Errno {
	switch {
	case e.Code < 1000:
		return syscall.Errno(e.Code)
	case e.Code == CodeEscape:
		return syscall.EACCES
	case e.Code == CodeTokenExpired, e.Code == CodeTokenInvalid, e.Code == CodeTokenRevoked, e.Code == CodeNoToken:
		return syscall.EACCES
	case e.Code == CodeUnavailable:
		return syscall.EAGAIN
	case e.Code == CodeMalformed, e.Code == CodeUnknownOp:
		return syscall.EPROTO
	default:
		return syscall.EIO
	}
}

// Is lets errors.Is match an *Error against fs sentinels and errnos.
func (e *Error) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Code == CodeNotExist || e.Code == CodeNotRegistered
	case fs.ErrExist:
		return e.Code == CodeExist
	case fs.ErrPermission:
		return e.Code == CodeAccess || e.Code == CodePerm || e.Code == CodeEscape
	}
	if t, ok := target.(*Error); ok {
		return t.Code == e.Code
	}
	if errno, ok := target.(syscall.Errno); ok {
		return e.Errno() == errno
	}
	return false
}

// Errorf builds an *Error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// FromError converts a local error into a wire error, keeping errno codes.
// The message is the error's text; callers strip local paths before this.
func FromError(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != 0 && errno < 1000 {
		return &Error{Code: Code(errno), Message: err.Error()}
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &Error{Code: CodeNotExist, Message: err.Error()}
	case errors.Is(err, fs.ErrExist):
		return &Error{Code: CodeExist, Message: err.Error()}
	case errors.Is(err, fs.ErrPermission):
		return &Error{Code: CodeAccess, Message: err.Error()}
	case errors.Is(err, ErrMalformed):
		return &Error{Code: CodeMalformed, Message: err.Error()}
	}
	return &Error{Code: CodeIO, Message: err.Error()}
}

// CodeOf returns the wire code of err, or 0 if err is not an *Error.
func CodeOf(err error) Code {
	var we *Error
	if errors.As(err, &we) {
		return we.Code
	}
	return 0
}
