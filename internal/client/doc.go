// Package client is the library every pando client uses (the CLI, the FUSE
// agent, gateways): it resolves global paths through the controller, keeps
// the signed tokens it gets for each mount prefix, keeps connections to the
// shares (a control channel and data channels per share), and runs file
// operations on them. The vfs holds it through the interfaces of
// internal/remote: a *Client is a remote.Namespace, and Data(c) is its
// remote.Data.
//
// Client is the data path: resolving paths and running file operations.
// The domain's administration (mounts, shares, users, ACLs, credentials,
// and the credential checks gateways make) is on Admin, from
// Client.Admin, which shares the Client's controller connection.
//
// Contract:
//   - Every call has a deadline (the context's, or rpc.DefaultTimeout).
//   - What is retried is decided by wire.FateOf, as everywhere: idempotent
//     operations are retried once on a broken connection; every operation
//     is sent again with a fresh token after its token expired or was
//     revoked (the share had not acted on it), up to three times; refusals
//     (rights, quota...) are never sent again. Nothing else is retried.
//   - Errors from shares are *wire.Error values: errors.Is works with
//     fs.ErrNotExist, fs.ErrPermission and syscall errnos.
//   - The controller is off the data path: while none answers, the mount
//     table and tokens held are used until the tokens expire (ctrl.go);
//     requests that needed it fail with errors matching
//     ErrControllerUnreachable.
package client
