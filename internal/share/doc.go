// Package share implements the share role: it exports one local directory,
// confined to its root with os.Root, to principals holding tokens signed by
// the domain's controller.
//
// Guarantees:
//   - No request reaches outside the root: paths are validated (no "..",
//     no absolute paths) and resolved through os.Root, which refuses
//     symlinks that leave the root.
//   - Every request is checked against a token the controller signed for the
//     connection's own principal; the share never calls the controller on
//     the data path. Revocations pushed by the controller take effect at once.
//   - A malformed request gets a clear error; the share keeps serving.
//   - Attr.Version is the file's change counter (its ctime in nanoseconds,
//     which Linux 6.13+ keeps fine-grained once observed): it changes with
//     every change of data or attributes, also those made by local programs.
package share
