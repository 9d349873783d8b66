package mount

import "testing"

func TestDeviceInMountinfo(t *testing.T) {
	const info = `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
42 22 0:39 / /tmp/a\040b/mnt rw,nosuid,nodev,relatime - fuse.pando pando rw,user_id=0
43 22 0:40 / /tmp/c/mnt rw - fuse.pando pando rw
44 43 0:41 / /tmp/c/mnt rw - fuse.pando pando rw
`
	for dir, want := range map[string]string{"/tmp/a b/mnt": "0:39", "/tmp/c/mnt": "0:41", "/": "8:1"} {
		if got, err := deviceIn(info, dir); err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %s", dir, got, err, want)
		}
	}
	if _, err := deviceIn(info, "/tmp/none"); err == nil {
		t.Error("a directory that is not mounted has a device")
	}
}
