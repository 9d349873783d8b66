// Package mount is the FUSE edge: it shows the whole namespace under a
// mount point, every operation served by package vfs, and translates vfs
// errors into errno values. It uses go-fuse's node API; the kernel caches
// entries and attributes for as long as the path's consistency mode allows
// (not at all on a mount lent to other local users), and keeps a file's
// page cache across opens while the file is unchanged. Only the agent's
// own uid and the uids it is lent to are served (guard.go). An open file
// is a vfs.File, as at every edge; what is FUSE's own is lending the
// kernel the cache's data file of a file held whole (passthrough.go).
package mount
