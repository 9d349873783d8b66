package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// AWS Signature Version 4, as S3 clients sign requests with it in the
// Authorization header (docs.aws.amazon.com, "Signature Version 4 signing
// process"; the S3 variant: paths are encoded once, the payload's hash
// travels in x-amz-content-sha256).

// Payload hashes a client may give instead of the body's SHA-256.
const (
	unsignedPayload = "UNSIGNED-PAYLOAD"
	// streamingUnsignedTrailer: the body is aws-chunked, unsigned, with a
	// trailing checksum (what recent AWS SDKs send over TLS).
	streamingUnsignedTrailer = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
)

const emptySHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// maxSkew is how far a request's time may be from the gateway's.
const maxSkew = 15 * time.Minute

// maxPresigned is the longest a presigned URL may be good for, as S3's
// seven days.
const maxPresigned = 7 * 24 * 3600

// S3Keys finds the user and secret of an access key.
type S3Keys interface {
	Secret(accessKey string) (user, secret string, ok bool)
}

// s3Error is an S3 error answer.
type s3Error struct {
	Status  int
	Code    string
	Message string
}

func (e *s3Error) Error() string { return e.Code + ": " + e.Message }

func s3Errf(status int, code, format string, args ...any) *s3Error {
	return &s3Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// sigv4 checks r's signature, in its Authorization header or in its
// query (a presigned URL); it returns the user the key is for and the
// payload hash the client signed.
func sigv4(r *http.Request, keys S3Keys, now time.Time) (user, payload string, err error) {
	authz := r.Header.Get("Authorization")
	var cred, signed, sig, amzDate string
	query := r.URL.Query()
	presigned := authz == "" && query.Has("X-Amz-Signature")
	switch {
	case presigned:
		if query.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
			return "", "", s3Errf(http.StatusBadRequest, "AuthorizationQueryParametersError", "X-Amz-Algorithm must be AWS4-HMAC-SHA256")
		}
		cred, signed, sig, amzDate = query.Get("X-Amz-Credential"), query.Get("X-Amz-SignedHeaders"), query.Get("X-Amz-Signature"), query.Get("X-Amz-Date")
		query.Del("X-Amz-Signature") // signed is all the rest
	case authz == "":
		return "", "", s3Errf(http.StatusForbidden, "AccessDenied", "the request is not signed; sign it with an access key of this gateway (pando serve s3-key)")
	default:
		alg, rest, _ := strings.Cut(authz, " ")
		if alg != "AWS4-HMAC-SHA256" {
			return "", "", s3Errf(http.StatusBadRequest, "InvalidRequest", "only AWS4-HMAC-SHA256 signatures are taken, not %.40q", alg)
		}
		for _, part := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
			switch k {
			case "Credential":
				cred = v
			case "SignedHeaders":
				signed = v
			case "Signature":
				sig = v
			}
		}
		amzDate = r.Header.Get("X-Amz-Date")
	}
	scope := strings.Split(cred, "/")
	if len(scope) != 5 || scope[3] != "s3" || scope[4] != "aws4_request" || signed == "" || len(sig) != 64 {
		if presigned {
			return "", "", s3Errf(http.StatusBadRequest, "AuthorizationQueryParametersError", "the query's X-Amz-Credential, X-Amz-SignedHeaders or X-Amz-Signature is malformed")
		}
		return "", "", s3Errf(http.StatusBadRequest, "AuthorizationHeaderMalformed", "the Authorization header is malformed")
	}
	user, secret, ok := keys.Secret(scope[0])
	if !ok {
		return "", "", s3Errf(http.StatusForbidden, "InvalidAccessKeyId", "the access key %.40q is not known to this gateway", scope[0])
	}
	t, terr := time.Parse("20060102T150405Z", amzDate)
	if terr != nil {
		return "", "", s3Errf(http.StatusForbidden, "AccessDenied", "the request has no valid X-Amz-Date")
	}
	if presigned {
		exp, err := strconv.Atoi(query.Get("X-Amz-Expires"))
		if err != nil || exp < 1 || exp > maxPresigned {
			return "", "", s3Errf(http.StatusBadRequest, "AuthorizationQueryParametersError", "X-Amz-Expires must be 1 to %d seconds", maxPresigned)
		}
		if now.Before(t.Add(-maxSkew)) {
			return "", "", s3Errf(http.StatusForbidden, "AccessDenied", "the URL is signed for %s, in the future", t.Format(time.RFC3339))
		}
		if now.After(t.Add(time.Duration(exp) * time.Second)) {
			return "", "", s3Errf(http.StatusForbidden, "AccessDenied", "Request has expired: the URL was good until %s", t.Add(time.Duration(exp)*time.Second).Format(time.RFC3339))
		}
	} else if d := now.Sub(t); d > maxSkew || d < -maxSkew {
		return "", "", s3Errf(http.StatusForbidden, "RequestTimeTooSkewed", "the request was signed at %s, more than %s from the gateway's time", t.Format(time.RFC3339), maxSkew)
	}
	if scope[1] != amzDate[:8] {
		return "", "", s3Errf(http.StatusForbidden, "SignatureDoesNotMatch", "the credential's date is not the request's")
	}
	headers := strings.Split(signed, ";")
	if !slices.Contains(headers, "host") || !slices.IsSorted(headers) {
		return "", "", s3Errf(http.StatusForbidden, "SignatureDoesNotMatch", "the signed headers must include host, in order")
	}
	payload = r.Header.Get("X-Amz-Content-Sha256")
	if presigned && payload == "" {
		payload = "UNSIGNED-PAYLOAD" // the body is not signed in a URL
	}
	if payload == "" {
		// Some clients (curl --aws-sigv4) sign without it: for a request
		// without a body, the hash is the empty string's.
		if r.ContentLength != 0 {
			return "", "", s3Errf(http.StatusBadRequest, "InvalidRequest", "the request has a body but no x-amz-content-sha256")
		}
		payload = emptySHA256
	}
	// The path as AWS's rules encode it, and as the client sent it (some
	// clients leave characters such as + or = unencoded, and sign them so).
	paths := []string{canonicalURI(r.URL.Path)}
	raw, _, _ := strings.Cut(r.RequestURI, "?")
	if _, rest, ok := strings.Cut(raw, "://"); ok { // absolute-form
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			raw = rest[i:]
		}
	}
	if raw != paths[0] && strings.HasPrefix(raw, "/") {
		paths = append(paths, raw)
	}
	var rest2 strings.Builder
	rest2.WriteString(canonicalQuery(query) + "\n")
	for _, h := range headers {
		var v string
		if h == "host" {
			v = r.Host
		} else {
			vals := r.Header.Values(h)
			if len(vals) == 0 {
				return "", "", s3Errf(http.StatusForbidden, "SignatureDoesNotMatch", "the signed header %.40q is missing", h)
			}
			for i := range vals {
				vals[i] = strings.Join(strings.Fields(vals[i]), " ")
			}
			v = strings.Join(vals, ",")
		}
		rest2.WriteString(h + ":" + v + "\n")
	}
	rest2.WriteString("\n" + signed + "\n" + payload)
	key := []byte("AWS4" + secret)
	for _, s := range scope[1:] {
		key = hmacSHA256(key, s)
	}
	ok = false
	for _, cp := range paths {
		sum := sha256.Sum256([]byte(r.Method + "\n" + cp + "\n" + rest2.String()))
		toSign := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + strings.Join(scope[1:], "/") + "\n" + hex.EncodeToString(sum[:])
		if hmac.Equal([]byte(hex.EncodeToString(hmacSHA256(key, toSign))), []byte(strings.ToLower(sig))) {
			ok = true
		}
	}
	if !ok {
		return "", "", s3Errf(http.StatusForbidden, "SignatureDoesNotMatch", "the request's signature does not match its contents and the access key's secret")
	}
	return user, payload, nil
}

func hmacSHA256(key []byte, s string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// awsEscape encodes s as SigV4 does: every byte but A-Z a-z 0-9 - _ . ~
// as %XX, and "/" too unless keepSlash.
func awsEscape(s string, keepSlash bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && keepSlash:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func canonicalURI(p string) string {
	if p == "" {
		return "/"
	}
	return awsEscape(p, true)
}

func canonicalQuery(q url.Values) string {
	var pairs [][2]string
	for k, vs := range q {
		for _, v := range vs {
			pairs = append(pairs, [2]string{awsEscape(k, false), awsEscape(v, false)})
		}
	}
	slices.SortFunc(pairs, func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	parts := make([]string, len(pairs))
	for i, p := range pairs {
		parts[i] = p[0] + "=" + p[1]
	}
	return strings.Join(parts, "&")
}
