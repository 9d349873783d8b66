package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestFate: every code the agent may meet while sending data is
// classified, wrapped or not, and only refusals are permanent.
func TestFate(t *testing.T) {
	cases := []struct {
		err       error
		fate      Fate
		permanent bool
	}{
		{nil, Transient, false},
		{errors.New("connection lost: EOF"), Transient, false},
		{context.DeadlineExceeded, Transient, false},
		{Errorf(CodeUnavailable, "shutting down"), Transient, false},
		{Errorf(CodeNoSpace, "no space left on device"), Transient, false},
		{Errorf(CodeIO, "input/output error"), Transient, false},
		{Errorf(CodeBadHandle, "stale handle"), Transient, false},
		{Errorf(CodeNotExist, "gone"), Transient, false},
		{Errorf(CodeIsDir, "a directory now"), Transient, false},
		{Errorf(CodeNotRegistered, "unknown share"), Transient, false},
		{Errorf(CodeTokenExpired, "expired"), Renew, false},
		{Errorf(CodeNoToken, "no token"), Renew, false},
		{Errorf(CodeTokenRevoked, "revoked"), Renew, true},
		{Errorf(CodeAccess, "alice lacks w"), Refused, true},
		{Errorf(CodePerm, "not permitted"), Refused, true},
		{Errorf(CodeEscape, "outside"), Refused, true},
		{Errorf(CodeTokenInvalid, "foreign"), Refused, true},
		{Errorf(CodeReadOnly, "read-only"), Refused, true},
		{Errorf(CodeQuota, "quota"), Refused, true},
		{Errorf(CodeFileTooBig, "too big"), Refused, true},
		{Errorf(CodeNameTooLong, "too long"), Refused, true},
		{fmt.Errorf("writing /d/x back to its share: %w", Errorf(CodeAccess, "alice lacks w")), Refused, true},
	}
	for _, c := range cases {
		if got := FateOf(c.err); got != c.fate {
			t.Errorf("FateOf(%v) = %v, want %v", c.err, got, c.fate)
		}
		if got := Permanent(c.err); got != c.permanent {
			t.Errorf("Permanent(%v) = %v, want %v", c.err, got, c.permanent)
		}
	}
}
