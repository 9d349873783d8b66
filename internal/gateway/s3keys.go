package gateway

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"pando.dev/pando/internal/auth"
)

// S3Keys is a gateway's file of S3 access keys: lines
// "ACCESSKEY:user:secret" (SigV4 needs the secret itself to check a
// signature, so the file is kept as a key is: mode 0600), read again when
// it changes (secretFile).
type S3Keys struct {
	file *secretFile[map[string][2]string] // access key -> user, secret
}

// OpenS3Keys reads the key file at path.
func OpenS3Keys(path string) (*S3Keys, error) {
	k := &S3Keys{file: newSecretFile("the S3 key file", path, func(b []byte) (map[string][2]string, error) {
		return parseS3Keys(path, b)
	})}
	if _, err := k.file.load(); err != nil {
		return nil, err
	}
	return k, nil
}

func parseS3Keys(path string, b []byte) (map[string][2]string, error) {
	m := make(map[string][2]string)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || f[0] == "" || f[2] == "" || auth.ValidName(f[1]) != nil {
			return nil, fmt.Errorf("the S3 key file %s, line %d: expected ACCESSKEY:user:secret (pando serve s3-key writes them)", path, n)
		}
		m[f[0]] = [2]string{f[1], f[2]}
	}
	return m, nil
}

// Secret returns the user and secret of an access key.
func (k *S3Keys) Secret(access string) (string, string, bool) {
	m, err := k.file.load()
	if err != nil {
		return "", "", false
	}
	e, ok := m[access]
	return e[0], e[1], ok
}

// NewS3Key adds a new access key for user to the file at path (made 0600
// if missing) and returns it with its secret.
func NewS3Key(path, user string) (access, secret string, err error) {
	if err := auth.ValidName(user); err != nil {
		return "", "", fmt.Errorf("user name: %w", err)
	}
	var a [10]byte
	var s [30]byte
	if _, err := rand.Read(a[:]); err != nil {
		return "", "", err
	}
	if _, err := rand.Read(s[:]); err != nil {
		return "", "", err
	}
	access = "PANDO" + base32.StdEncoding.EncodeToString(a[:])
	secret = base64.RawStdEncoding.EncodeToString(s[:])
	secret = strings.NewReplacer("+", "A", "/", "B").Replace(secret)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return "", "", err
	}
	if _, err := fmt.Fprintf(f, "%s:%s:%s\n", access, user, secret); err != nil {
		f.Close()
		return "", "", err
	}
	return access, secret, f.Close()
}
