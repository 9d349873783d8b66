package web

import (
	"encoding/base64"
	"encoding/xml"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"pando.dev/pando/internal/wire"
)

// s3Item is an object or a common prefix of a listing.
type s3Item struct {
	key    string
	prefix bool
	size   int64
	mtime  int64
	etag   string
}

// listBuckets answers ListBuckets: the folders below the bucket root,
// in order, with prefix, max-buckets and continuation-token.
func (q *s3Req) listBuckets() error {
	vals := q.r.URL.Query()
	max := 10000
	if m := vals.Get("max-buckets"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 1 || n > 10000 {
			return s3Errf(http.StatusBadRequest, "InvalidArgument", "max-buckets must be 1 to 10000")
		}
		max = n
	}
	after := ""
	if tok := vals.Get("continuation-token"); tok != "" {
		b, err := base64.RawURLEncoding.DecodeString(tok)
		if err != nil {
			return s3Errf(http.StatusBadRequest, "InvalidArgument", "the continuation token is not one this gateway gave")
		}
		after = string(b)
	}
	prefix := vals.Get("prefix")
	ents, err := q.v.ReadDir(q.ctx, q.s.root)
	if err != nil {
		return err
	}
	slices.SortFunc(ents, func(a, b wire.DirEntry) int { return strings.Compare(a.Name, b.Name) })
	type bucket struct{ Name, CreationDate string }
	var res struct {
		XMLName           xml.Name `xml:"ListAllMyBucketsResult"`
		NS                string   `xml:"xmlns,attr"`
		Owner             struct{ ID, DisplayName string }
		Buckets           []bucket `xml:"Buckets>Bucket"`
		ContinuationToken string   `xml:",omitempty"`
		Prefix            string   `xml:",omitempty"`
	}
	res.NS, res.Owner.ID, res.Owner.DisplayName, res.Prefix = s3XMLNS, q.user, q.user, prefix
	for _, e := range ents {
		if e.Attr.Mode&syscall.S_IFMT != syscall.S_IFDIR || e.Name == "." || e.Name == ".." || e.Name <= after || !strings.HasPrefix(e.Name, prefix) {
			continue
		}
		if len(res.Buckets) == max {
			res.ContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(res.Buckets[max-1].Name))
			break
		}
		res.Buckets = append(res.Buckets, bucket{e.Name, s3Time(e.Attr.Mtime)})
	}
	writeXML(q.w, res)
	return nil
}

// collect lists the keys below the bucket that begin with prefix, in
// order; with delimiter "/" it does not descend into the directories
// that become common prefixes.
func (q *s3Req) collect(prefix, delimiter string) ([]s3Item, error) {
	var out []s3Item
	walked := 0
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := q.v.ReadDir(q.ctx, q.path(dir))
		if err != nil {
			return err
		}
		if walked += len(ents); walked > maxListWalk {
			return s3Errf(http.StatusNotImplemented, "NotImplemented", "a listing walks at most %d names; list with a longer prefix or the delimiter /", maxListWalk)
		}
		for _, e := range ents {
			if e.Name == "." || e.Name == ".." {
				continue
			}
			k := dir + e.Name
			switch e.Attr.Mode & syscall.S_IFMT {
			case syscall.S_IFDIR:
				kd := k + "/"
				switch {
				case strings.HasPrefix(kd, prefix) && delimiter == "/":
					out = append(out, s3Item{key: kd, prefix: true})
				case strings.HasPrefix(kd, prefix) || strings.HasPrefix(prefix, kd):
					n := len(out)
					if err := walk(kd); err != nil {
						return err
					}
					if len(out) == n && strings.HasPrefix(kd, prefix) {
						out = append(out, s3Item{key: kd, mtime: e.Attr.Mtime, etag: `"` + emptyMD5 + `"`}) // an empty directory
					}
				}
			case syscall.S_IFREG:
				if strings.HasPrefix(k, prefix) {
					out = append(out, s3Item{key: k, size: e.Attr.Size, mtime: e.Attr.Mtime, etag: q.etag(q.path(k), e.Attr)})
				}
			}
		}
		return nil
	}
	start := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		start = prefix[:i+1]
		if checkKey(start) != nil {
			return nil, nil
		}
		a, err := q.v.GetAttr(q.ctx, q.path(start))
		if err != nil || a.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			return nil, nil // nothing has that prefix
		}
	}
	if err := walk(start); err != nil {
		return nil, err
	}
	// Other delimiters, and "/" in a prefix below, group here.
	if delimiter != "" {
		seen := map[string]bool{}
		grouped := out[:0]
		for _, it := range out {
			if i := strings.Index(it.key[len(prefix):], delimiter); i >= 0 {
				cp := it.key[:len(prefix)+i+len(delimiter)]
				if !seen[cp] {
					seen[cp] = true
					grouped = append(grouped, s3Item{key: cp, prefix: true})
				}
				continue
			}
			grouped = append(grouped, it)
		}
		out = grouped
	}
	slices.SortFunc(out, func(a, b s3Item) int { return strings.Compare(a.key, b.key) })
	return out, nil
}

type s3Object struct {
	Key          string
	LastModified string
	ETag         string
	Size         int64
	StorageClass string
}

type s3Prefix struct{ Prefix string }

// list answers ListObjects, ListObjectsV2 and ListObjectVersions (each
// object one version, null, the latest: versions are not kept).
func (q *s3Req) list(op s3Op, vals url.Values) error {
	v2 := vals.Get("list-type") == "2"
	prefix, delimiter := vals.Get("prefix"), vals.Get("delimiter")
	enc := vals.Get("encoding-type")
	if enc != "" && enc != "url" {
		return s3Errf(http.StatusBadRequest, "InvalidArgument", "encoding-type must be url")
	}
	max, err := countParam(vals, "max-keys", 1000, 1000)
	if err != nil {
		return err
	}
	after := vals.Get("marker")
	token := vals.Get("continuation-token")
	if op == opListVersions {
		after = vals.Get("key-marker")
		if m := vals.Get("version-id-marker"); m != "" && m != "null" {
			return s3Errf(http.StatusBadRequest, "InvalidArgument", "version-id-marker %.40q names no version: versions are not kept", m)
		}
	}
	if v2 {
		after = vals.Get("start-after")
		if token != "" {
			b, err := base64.RawURLEncoding.DecodeString(token)
			if err != nil {
				return s3Errf(http.StatusBadRequest, "InvalidArgument", "the continuation token is not one this gateway gave")
			}
			after = max2(after, string(b))
		}
	}
	items, err := q.collect(prefix, delimiter)
	if err != nil {
		return err
	}
	i, _ := slices.BinarySearchFunc(items, after, func(it s3Item, k string) int { return strings.Compare(it.key, k) })
	for i < len(items) && items[i].key <= after {
		i++
	}
	items = items[i:]
	truncated := len(items) > max && max > 0
	if len(items) > max {
		items = items[:max]
	}
	esc := func(s string) string {
		if enc == "url" {
			return awsEscape(s, true)
		}
		return s
	}
	var objs []s3Object
	var cps []s3Prefix
	for _, it := range items {
		if it.prefix {
			cps = append(cps, s3Prefix{esc(it.key)})
		} else {
			objs = append(objs, s3Object{Key: esc(it.key), LastModified: s3Time(it.mtime), ETag: it.etag, Size: it.size, StorageClass: "STANDARD"})
		}
	}
	last := ""
	if truncated && len(items) > 0 {
		last = items[len(items)-1].key
	}
	if op == opListVersions {
		q.listVersions(prefix, delimiter, enc, max, truncated, objs, cps, esc(after), esc(last))
		return nil
	}
	res := struct {
		XMLName               xml.Name `xml:"ListBucketResult"`
		NS                    string   `xml:"xmlns,attr"`
		Name                  string
		Prefix                string
		Delimiter             string `xml:",omitempty"`
		MaxKeys               int
		EncodingType          string `xml:",omitempty"`
		IsTruncated           bool
		Marker                *string    `xml:",omitempty"`
		NextMarker            string     `xml:",omitempty"`
		KeyCount              *int       `xml:",omitempty"`
		ContinuationToken     *string    `xml:",omitempty"`
		NextContinuationToken string     `xml:",omitempty"`
		StartAfter            string     `xml:",omitempty"`
		Contents              []s3Object `xml:"Contents"`
		CommonPrefixes        []s3Prefix `xml:"CommonPrefixes"`
	}{NS: s3XMLNS, Name: q.bucket, Prefix: esc(prefix), Delimiter: esc(delimiter), MaxKeys: max, EncodingType: enc,
		IsTruncated: truncated, Contents: objs, CommonPrefixes: cps}
	if !v2 {
		// ListObjects encodes the keys, markers and delimiter, not the
		// prefix it was given (what S3 answers, and the SDKs decode).
		res.Prefix = prefix
	}
	if v2 {
		n := len(items)
		res.KeyCount, res.StartAfter = &n, esc(vals.Get("start-after"))
		if vals.Has("continuation-token") {
			res.ContinuationToken = &token
		}
		if last != "" {
			res.NextContinuationToken = base64.RawURLEncoding.EncodeToString([]byte(last))
		}
	} else {
		m := esc(after)
		res.Marker = &m
		if last != "" {
			res.NextMarker = esc(last)
		}
	}
	writeXML(q.w, res)
	return nil
}

func max2(a, b string) string {
	if a > b {
		return a
	}
	return b
}

// listVersions writes a ListVersionsResult of the objects and prefixes
// of a listing.
func (q *s3Req) listVersions(prefix, delimiter, enc string, max int, truncated bool, objs []s3Object, cps []s3Prefix, after, last string) {
	type owner struct{ ID, DisplayName string }
	type version struct {
		Key          string
		VersionId    string
		IsLatest     bool
		LastModified string
		ETag         string
		Size         int64
		StorageClass string
		Owner        owner
	}
	res := struct {
		XMLName             xml.Name `xml:"ListVersionsResult"`
		NS                  string   `xml:"xmlns,attr"`
		Name                string
		Prefix              string
		KeyMarker           string
		VersionIdMarker     string
		NextKeyMarker       string `xml:",omitempty"`
		NextVersionIdMarker string `xml:",omitempty"`
		Delimiter           string `xml:",omitempty"`
		MaxKeys             int
		EncodingType        string `xml:",omitempty"`
		IsTruncated         bool
		Version             []version
		CommonPrefixes      []s3Prefix `xml:"CommonPrefixes"`
	}{NS: s3XMLNS, Name: q.bucket, Prefix: prefix, KeyMarker: after, Delimiter: delimiter, MaxKeys: max, EncodingType: enc,
		IsTruncated: truncated, CommonPrefixes: cps}
	if enc == "url" {
		res.Prefix, res.Delimiter = awsEscape(prefix, true), awsEscape(delimiter, true)
	}
	if truncated {
		res.NextKeyMarker, res.NextVersionIdMarker = last, "null"
	}
	for _, o := range objs {
		res.Version = append(res.Version, version{o.Key, "null", true, o.LastModified, o.ETag, o.Size, o.StorageClass, owner{q.user, q.user}})
	}
	writeXML(q.w, res)
}
