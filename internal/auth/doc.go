// Package auth holds pando's security primitives: the domain's CA and the
// identities in its certificates, mutual TLS 1.3 configurations, AFS-style
// rights and ACLs on namespace prefixes, and the capability tokens the
// controller signs and shares verify offline; and the bearer tokens of
// the WLCG profile (JWTs, storage scopes) that controllers verify against
// the key sets of the issuers they trust.
//
// Guarantees:
//   - Peers are identified by the URI SAN of a certificate that chains to
//     the domain's CA, never by a host name or by anything a client says.
//   - Negative ACL entries win over grants, at any depth.
//   - A token verifies only with the domain's token key, only until it
//     expires, and grants nothing outside its root.
//   - A JWT verifies only with a key of the set given, by its key id,
//     signed ES256 or EdDSA, between its nbf and exp; its scopes give
//     rights only on their paths and below.
package auth
