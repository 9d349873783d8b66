package auth

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Role is what a certificate's holder is.
type Role string

// Roles.
const (
	RoleUser       Role = "user"
	RoleShare      Role = "share"
	RoleController Role = "controller"
	// RoleGateway is a gateway (HTTP, WebDAV, ...): it has no rights of
	// its own and acts only for the users it authenticates, with tokens
	// the controller issues to it in their names.
	RoleGateway Role = "gateway"
)

// Identity is a principal of a domain.
type Identity struct {
	Domain, Name string
	Role         Role
}

// String is the principal's name as people see it: "alice@uva" for users,
// "share:data@uva" for shares, "controller@uva".
func (id Identity) String() string {
	switch id.Role {
	case RoleUser:
		return id.Name + "@" + id.Domain
	case RoleController:
		return "controller@" + id.Domain
	}
	return string(id.Role) + ":" + id.Name + "@" + id.Domain
}

// URI is the identity as stored in a certificate's URI SAN.
func (id Identity) URI() string {
	return "pando://" + id.Domain + "/" + string(id.Role) + "/" + id.Name
}

// ParseIdentityURI parses what URI returns.
func ParseIdentityURI(s string) (Identity, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "pando" {
		return Identity{}, fmt.Errorf("%q is not a pando identity", s)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 2 {
		return Identity{}, fmt.Errorf("%q is not a pando identity", s)
	}
	id := Identity{Domain: u.Host, Role: Role(parts[0]), Name: parts[1]}
	switch id.Role {
	case RoleUser, RoleShare, RoleController, RoleGateway:
	default:
		return Identity{}, fmt.Errorf("%q names an unknown role %q", s, parts[0])
	}
	if err := ValidName(id.Domain); err != nil {
		return Identity{}, err
	}
	if err := ValidName(id.Name); err != nil {
		return Identity{}, err
	}
	return id, nil
}

// IdentityFromCert reads the identity in a certificate.
func IdentityFromCert(c *x509.Certificate) (Identity, error) {
	for _, u := range c.URIs {
		if u.Scheme == "pando" {
			return ParseIdentityURI(u.String())
		}
	}
	return Identity{}, errors.New("the certificate carries no pando identity")
}

// ValidName checks a user, share, group or domain name.
func ValidName(s string) error {
	if len(s) == 0 || len(s) > 64 {
		return fmt.Errorf("name %q must be 1 to 64 characters long", s)
	}
	for i, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || i > 0 && (r == '.' || r == '_' || r == '-')
		if !ok {
			return fmt.Errorf("name %q may hold only lower-case letters, digits and (not first) '.', '_' or '-'", s)
		}
	}
	return nil
}
