// Package config reads and writes a client's configuration: which
// controller to talk to and the credentials (a certificate and key issued by
// the domain's CA) to talk to it with. One file holds all of it, so the
// bundle `pando user add` writes for a new user is a complete configuration.
//
// Where it lives: the --config flag, else $PANDO_CONFIG, else
// $XDG_CONFIG_HOME/pando/config.json (~/.config/pando/config.json).
package config

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"pando.dev/pando/internal/auth"
)

// Config is a client configuration and credential bundle.
type Config struct {
	Domain     string `json:"domain"`
	Controller string `json:"controller"` // host:port of the controller
	// Controllers lists more addresses of the domain's controllers (several
	// serving one etcd store), tried in turn when Controller does not answer.
	Controllers []string `json:"controllers,omitempty"`
	User        string   `json:"user"`
	CA          string   `json:"ca"`   // PEM of the domain's CA certificate
	Cert        string   `json:"cert"` // PEM of the user's certificate
	Key         string   `json:"key"`  // PEM of the user's private key
}

// ControllerAddrs returns every controller address the configuration knows,
// Controller first, without repeats.
func (c *Config) ControllerAddrs() []string {
	var out []string
	for _, a := range append([]string{c.Controller}, c.Controllers...) {
		if a != "" && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// ErrNoConfig is returned (wrapped) by Load when there is no file.
var ErrNoConfig = errors.New("no pando configuration")

// DefaultPath returns where the configuration is looked for when no flag
// names one.
func DefaultPath() string {
	if p := os.Getenv("PANDO_CONFIG"); p != "" {
		return p
	}
	dir := os.Getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "pando", "config.json")
}

// Load reads the configuration at path ("" for DefaultPath).
func Load(path string) (*Config, error) {
	if path == "" {
		path = DefaultPath()
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w at %s: start a domain with `pando up`, or pass the bundle your administrator made with `pando user add` (--config FILE or PANDO_CONFIG)", ErrNoConfig, path)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read the pando configuration: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("the pando configuration %s is not valid JSON (%v); recreate it with `pando user add` or `pando up`", path, err)
	}
	if c.Controller == "" || c.CA == "" || c.Cert == "" || c.Key == "" || c.Domain == "" {
		return nil, fmt.Errorf("the pando configuration %s lacks the controller address or credentials; recreate it with `pando user add` or `pando up`", path)
	}
	return &c, nil
}

// Save writes the configuration atomically, readable only by its owner.
func (c *Config) Save(path string) error {
	if path == "" {
		path = DefaultPath()
	}
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("cannot create %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".config-*")
	if err != nil {
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("cannot write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Certificate returns the TLS certificate of the bundle.
func (c *Config) Certificate() (tls.Certificate, error) {
	cert, err := tls.X509KeyPair([]byte(c.Cert), []byte(c.Key))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("the credentials in the pando configuration are damaged: %w", err)
	}
	return cert, nil
}

// ClientTLS returns a TLS configuration for dialling peers of the domain;
// expect checks the peer's identity.
func (c *Config) ClientTLS(expect func(auth.Identity) error) (*tls.Config, error) {
	cert, err := c.Certificate()
	if err != nil {
		return nil, err
	}
	pool, err := auth.PoolFromPEM([]byte(c.CA))
	if err != nil {
		return nil, fmt.Errorf("the CA certificate in the pando configuration is damaged: %w", err)
	}
	return auth.ClientConfig(cert, pool, expect), nil
}
