package bench

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The warm reads are timed with curl, a process of its own, so that the
// CPU the serving process spends can be told from the client's: wall
// clock on a shared machine swings with its load, CPU-seconds per GiB of
// the server hold still. A gateway runs in the bench's own process (whose
// other parts are idle meanwhile); rclone serve is a process of its own.

// emptySHA256 is the SHA-256 of an empty body (a GET's).
const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// procCPU is the user and system CPU time pid has used (0: this process).
func procCPU(pid int) (time.Duration, error) {
	name := "/proc/self/stat"
	if pid != 0 {
		name = "/proc/" + strconv.Itoa(pid) + "/stat"
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis; utime and
	// stime are the 14th and 15th of the whole line, in clock ticks
	// (USER_HZ, 100 on Linux).
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%s: too few fields", name)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%s: utime %q, stime %q", name, f[11], f[12])
	}
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// warmRead is one timed read of a whole file by curl.
type warmRead struct {
	mbps      float64
	serverCPU float64 // CPU-seconds per GiB of the serving process
	clientCPU float64 // and of curl
}

// curlGet reads name through c with curl, timing it and counting the CPU
// of the serving process pid (0: this one) and of curl.
func (c *gwClient) curlGet(name string, size int64, caFile string, pid int) (warmRead, error) {
	u := c.base + c.bucketPath + "/" + name
	args := []string{"-sS", "--fail", "-o", "/dev/null", "-w", "%{size_download}"}
	if strings.HasPrefix(u, "https:") {
		args = append(args, "--cacert", caFile)
	}
	if c.s3 {
		req, err := http.NewRequest("GET", u, nil)
		if err != nil {
			return warmRead{}, err
		}
		req.Header.Set("X-Amz-Content-Sha256", emptySHA256)
		if err := v4.NewSigner(func(o *v4.SignerOptions) { o.DisableURIPathEscaping = true }).SignHTTP(context.Background(),
			aws.Credentials{AccessKeyID: c.user, SecretAccessKey: c.pass}, req, emptySHA256, "s3", "us-east-1", time.Now()); err != nil {
			return warmRead{}, err
		}
		for k, vs := range req.Header {
			args = append(args, "-H", k+": "+vs[0])
		}
	} else if c.user != "" {
		args = append(args, "-u", c.user+":"+c.pass)
	}
	args = append(args, u)
	cmd := exec.Command("curl", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	s0, err := procCPU(pid)
	if err != nil {
		return warmRead{}, err
	}
	t0 := time.Now()
	err = cmd.Run()
	d := time.Since(t0)
	s1, serr := procCPU(pid)
	if err != nil {
		return warmRead{}, fmt.Errorf("curl GET %s through %s: %w (%s)", name, c.description, err, strings.TrimSpace(errb.String()))
	}
	if serr != nil {
		return warmRead{}, serr
	}
	if n, _ := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64); n != size {
		return warmRead{}, fmt.Errorf("curl GET %s through %s: %s bytes of %d", name, c.description, out.String(), size)
	}
	gib := float64(size) / (1 << 30)
	cc := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return warmRead{mbps: mbps(size, d), serverCPU: (s1 - s0).Seconds() / gib, clientCPU: cc.Seconds() / gib}, nil
}
