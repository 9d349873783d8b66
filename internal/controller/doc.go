// Package controller implements the controller role: the domain's CA and
// token key, the namespace's mount table, users (with the passwords, S3
// keys and sign-in tokens gateways ask it to check), groups, shares and
// ACLs, kept in a store.Store: bbolt for a controller of its own, or
// etcd, which lets several controllers serve one domain (tier.go).
//
// The controller answers "where is this path and what may I do there" with
// a short-lived token it signs; shares verify tokens offline, so the
// controller stays off the data path. It signs tokens for a gateway in a
// user's name, usable by that gateway only (wire.ResolveReq.For), and
// tokens a share may present at another on a client's behalf, for
// third-party copies (wire.ResolveReq.Proxy). It pushes revocations
// (revoked users, ACL changes) to shares and gateways over the
// connections they keep open to it.
package controller
