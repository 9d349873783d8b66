// Package cli holds what pando's commands share: loading the client
// configuration, building a client, turning errors into one sentence and an
// exit code, and formatting listings. cmd/pando keeps only flags and wiring.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"pando.dev/pando/internal/client"
	"pando.dev/pando/internal/config"
	"pando.dev/pando/internal/rpc"
	"pando.dev/pando/internal/wire"
)

// Globals are the flags every command has.
type Globals struct {
	ConfigPath string
	Timeout    time.Duration
	Verbose    bool
}

// Logger returns the logger commands use: quiet unless -v.
func (g *Globals) Logger() *slog.Logger {
	level := slog.LevelWarn
	if g.Verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// Config loads the client configuration.
func (g *Globals) Config() (*config.Config, error) { return config.Load(g.ConfigPath) }

// KeepCert returns what a long-running command does with a certificate
// its client renewed: write it, with its key, back to the configuration
// file cfg was loaded from (the renewal lives on after a restart). A file
// that cannot be written is said in a warning; the new certificate serves
// in memory meanwhile.
func (g *Globals) KeepCert(cfg *config.Config) func(cert, key []byte) {
	path := g.ConfigPath
	if path == "" {
		path = config.DefaultPath()
	}
	var mu sync.Mutex
	return func(cert, key []byte) {
		mu.Lock()
		defer mu.Unlock()
		next := *cfg
		next.Cert, next.Key = string(cert), string(key)
		if err := next.Save(path); err != nil {
			g.Logger().Warn("the renewed certificate could not be written to the configuration; it serves until this process ends", "config", path, "err", err)
			return
		}
		g.Logger().Info("certificate renewed and written to the configuration", "config", path)
	}
}

// Client loads the configuration and makes a client.
func (g *Globals) Client() (*client.Client, error) {
	cfg, err := g.Config()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{})
}

// Context applies --timeout to ctx.
func (g *Globals) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	if g.Timeout > 0 {
		return context.WithTimeout(ctx, g.Timeout)
	}
	return context.WithCancel(ctx)
}

// Exit codes, so that scripts can tell failures apart.
const (
	ExitOK          = 0
	ExitFailure     = 1 // anything not below
	ExitUsage       = 2 // bad flags or arguments
	ExitNotFound    = 3 // no such file, share, user or mount
	ExitPermission  = 4 // a right is missing, or credentials were refused
	ExitUnavailable = 5 // a server could not be reached
	ExitExists      = 6 // the target already exists
)

// UsageError marks a mistake in the command line.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef makes a UsageError.
func Usagef(format string, args ...any) error { return &UsageError{fmt.Sprintf(format, args...)} }

// ExitCode maps an error to the process's exit code.
func ExitCode(err error) int {
	var ue *UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue):
		return ExitUsage
	case errors.Is(err, fs.ErrNotExist):
		return ExitNotFound
	case errors.Is(err, fs.ErrExist):
		return ExitExists
	case errors.Is(err, fs.ErrPermission), wire.CodeOf(err) >= wire.CodeTokenExpired && wire.CodeOf(err) <= wire.CodeNoToken,
		errors.Is(err, config.ErrNoConfig):
		return ExitPermission
	case errors.Is(err, rpc.ErrBroken), errors.Is(err, client.ErrUnreachable), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, context.DeadlineExceeded):
		return ExitUnavailable
	}
	return ExitFailure
}

// Message is the one sentence shown for err.
func Message(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return err.Error() + " (the operation took longer than allowed; raise --timeout or check the network)"
	}
	if errors.Is(err, context.Canceled) {
		return "interrupted"
	}
	return err.Error()
}

// VersionString describes this build.
func VersionString() string {
	v := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	return fmt.Sprintf("pando %s (protocol %d)", v, wire.Version)
}

// ClientFor makes a client for an explicit configuration.
func (g *Globals) ClientFor(cfg *config.Config) (*client.Client, error) {
	return client.New(cfg, client.Options{})
}
