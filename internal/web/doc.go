// Package web is a gateway's HTTP front ends: Server serves plain HTTP(S)
// (GET with ranges, HEAD, conditional requests, listings and a web page,
// PUT, DELETE) and, if asked, WebDAV class 1 and 2 on the same URLs; S3
// serves the names below the domain as buckets, to requests signed with
// SigV4. The URL path is the global path.
//
// It is an edge: it imports only the vfs and wire. Every request is made
// on the vfs of the user who sent it (Users), after an Authenticator or,
// for S3, S3Keys names that user, so the user's own rights decide. Before
// it reaches the vfs, a request is named as one operation of its front
// end's allow-list (httpallow.go, s3allow.go); anything else is refused,
// never served as the plain read or write it resembles. A GET of a file
// the cache holds whole is sent straight from the cache's data file (with
// sendfile in clear text); anything else is read through the vfs (File).
package web
