package wire

import (
	"reflect"
	"testing"
)

// TestDecodeAmplificationBounded decodes the worst meta known for each
// message with arrays (MaxMeta bytes of one-byte elements) and checks it
// against the bound FuzzDecodeFrame holds every message to.
func TestDecodeAmplificationBounded(t *testing.T) {
	array := func(key, elem byte) []byte {
		n := MaxMeta - 16
		b := []byte{0xa1, key, 0x9a, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
		for range n {
			b = append(b, elem)
		}
		return b
	}
	for name, c := range map[string]struct {
		meta []byte
		v    any
	}{
		"listing entries":         {array(1, 0xa0), &ReadDirResp{}},
		"acl entries":             {array(2, 0xa0), &ACLSetReq{}},
		"share addresses":         {array(2, 0x60), &ShareRegisterReq{}},
		"pending ranges":          {array(4, 0xa0), &DelegReturnReq{}},
		"invalidated paths":       {array(1, 0x60), &GetInvResp{}},
		"sums":                    {array(1, 0x00), &SumResp{}},
		"users":                   {array(1, 0xa0), &UserListResp{}},
		"recalls of a delegation": {array(6, 0xa0), &GetInvResp{}},
	} {
		if err := Unmarshal(c.meta, c.v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n := footprint(reflect.ValueOf(c.v))
		if n > maxAmplification*len(c.meta)+1024 {
			t.Errorf("%s: %d bytes of meta decode to %d bytes, over %dx", name, len(c.meta), n, maxAmplification)
		}
		t.Logf("%s: %d bytes of meta decode to %d MiB (%.0fx)", name, len(c.meta), n>>20, float64(n)/float64(len(c.meta)))
	}
}
