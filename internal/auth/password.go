package auth

import (
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
)

// Password hashing.
const (
	pbkdf2Iter = 210_000
	saltLen    = 16
	keyLen     = 32
	hashPrefix = "pbkdf2-sha256"
)

// slowHashes bounds the password hashes computed at once in a process,
// by HashPassword and CheckPasswordHash alike, so that a flood of
// password guesses takes two cores at most.
var slowHashes = make(chan struct{}, 2)

// HashPassword returns the stored form of a password:
// "pbkdf2-sha256$ITER$SALT$KEY", PBKDF2-HMAC-SHA256 with a 16-byte salt.
// It waits while two hashes are under way.
func HashPassword(pw string) (string, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	slowHashes <- struct{}{}
	k, err := pbkdf2.Key(sha256.New, pw, salt, pbkdf2Iter, keyLen)
	<-slowHashes
	if err != nil {
		return "", err
	}
	enc := base64.RawStdEncoding
	return fmt.Sprintf("%s$%d$%s$%s", hashPrefix, pbkdf2Iter, enc.EncodeToString(salt), enc.EncodeToString(k)), nil
}

// NoPasswordHash is checked against when a user has no password, so that
// an unknown user costs as much time as a known one and timing tells no
// names. No password matches it.
const NoPasswordHash = "pbkdf2-sha256$210000$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// CheckPasswordHash reports whether pw is the password stored as h. It
// waits while two hashes are under way.
func CheckPasswordHash(h, pw string) bool {
	parts := strings.Split(h, "$")
	if len(parts) != 4 || parts[0] != hashPrefix {
		return false
	}
	iter, err := strconv.Atoi(parts[1])
	if err != nil || iter < 1000 || iter > 10_000_000 {
		return false
	}
	enc := base64.RawStdEncoding
	salt, err1 := enc.DecodeString(parts[2])
	want, err2 := enc.DecodeString(parts[3])
	if err1 != nil || err2 != nil || len(want) != keyLen {
		return false
	}
	slowHashes <- struct{}{}
	got, err := pbkdf2.Key(sha256.New, pw, salt, iter, keyLen)
	<-slowHashes
	return err == nil && subtle.ConstantTimeCompare(got, want) == 1
}
