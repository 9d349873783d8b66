// Package mount is the FUSE edge: it shows the whole namespace under a
// mount point, every operation served by package vfs, and translates vfs
// errors into errno values. It uses go-fuse's node API; the kernel caches
// entries and attributes for as long as the path's consistency mode allows,
// and keeps a file's page cache across opens while the file is unchanged.
package mount
