// Package sandboxtest holds the real-Docker tests of sandboxes
// (docs/sandboxes.md) on an in-process test cluster: create, exec, files,
// close, idle and lifetime expiry, a lost worker; and of the heads' API
// without workers (no Docker needed). It is a package of its
// own so that its tests run beside internal/testcluster's. It has no code
// but this comment.
package sandboxtest
