// Package controller implements the controller role: the domain's CA and
// token key, the namespace's mount table, users, groups, shares and ACLs,
// kept in a store.Store (bbolt now, etcd later).
//
// The controller answers "where is this path and what may I do there" with
// a short-lived token it signs; shares verify tokens offline, so the
// controller stays off the data path. It pushes revocations (revoked users,
// ACL changes) to shares over the connections they keep open to it.
package controller
