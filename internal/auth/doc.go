// Package auth holds pando's security primitives: the domain's CA and the
// identities in its certificates, mutual TLS 1.3 configurations, AFS-style
// rights and ACLs on namespace prefixes, and the capability tokens the
// controller signs and shares verify offline.
//
// Guarantees:
//   - Peers are identified by the URI SAN of a certificate that chains to
//     the domain's CA, never by a host name or by anything a client says.
//   - Negative ACL entries win over grants, at any depth.
//   - A token verifies only with the domain's token key, only until it
//     expires, and grants nothing outside its root.
package auth
