package wire

// What a client does about a failed request is decided here, and only
// here: the client library (renewing tokens, resending over a new
// connection) and every loop of the agent that sends data again (the
// write-back at close, the replay of unsent data, write delegations sent
// back on a timer, at a recall or at unmount) ask FateOf or Permanent.

// Fate is what becomes of a request that failed.
type Fate uint8

const (
	// Transient: it may succeed later, unchanged (the network, a share
	// unreachable, restarting or overloaded, a timeout, no space left at
	// the share). Data waiting to be sent is kept and sent again.
	Transient Fate = iota
	// Renew: the share refused the token, not the request. The client
	// fetches a fresh token and sends the request again at once, a few
	// times at most.
	Renew
	// Refused: the share refuses this principal's request for good
	// (rights, quota, a read-only share, a file or name too large, a
	// credential revoked). Sent again, it gets the same answer: it is
	// never retried, and data it carried is dropped.
	Refused
)

func (f Fate) String() string {
	switch f {
	case Renew:
		return "renew"
	case Refused:
		return "refused"
	}
	return "transient"
}

// FateOf classifies err (nil is Transient: nothing to refuse).
func FateOf(err error) Fate {
	if err == nil {
		return Transient
	}
	switch CodeOf(err) {
	case CodeTokenExpired, CodeNoToken, CodeTokenRevoked:
		// A share says "revoked" also of a token that predates an
		// access-control change; the controller's answer to the
		// renewal settles it (see Permanent).
		return Renew
	case CodeAccess, CodePerm, CodeEscape, CodeTokenInvalid,
		CodeReadOnly, CodeQuota, CodeFileTooBig, CodeNameTooLong:
		return Refused
	}
	// Everything else: connection lost, unreachable, unavailable,
	// timeouts, ENOSPC, EIO, a stale handle. Errors of the namespace
	// (ENOENT, EISDIR, ENOTDIR) are not refusals either: the file is gone
	// or replaced, which the replay of unsent data settles as a conflict.
	return Transient
}

// Permanent reports whether err refuses a request for good, as seen above
// the client library, which has already renewed its token when FateOf said
// Renew: a token revoked that reaches its caller was revoked again by the
// controller when asked for a fresh one. Expired or missing tokens that
// still reach it are taken for a passing fault (clocks, a controller
// restarting) and stay Transient.
func Permanent(err error) bool {
	switch FateOf(err) {
	case Refused:
		return true
	case Renew:
		return CodeOf(err) == CodeTokenRevoked
	}
	return false
}
