package cache

import (
	"io"
	"io/fs"
	"os"
	"time"
)

// FS is the file system the disk tier works through: OSFS in production,
// and in tests a wrapper of it that injects faults (ENOSPC, short or torn
// writes, a writer that blocks). Paths are OS paths, not io/fs paths.
type FS interface {
	MkdirAll(dir string, perm fs.FileMode) error
	OpenFile(name string, flag int, perm fs.FileMode) (File, error)
	ReadDir(dir string) ([]fs.DirEntry, error)
	Stat(name string) (fs.FileInfo, error)
	Chtimes(name string, atime, mtime time.Time) error
	Rename(oldname, newname string) error
	// Link makes newname a hard link to oldname; it fails when newname
	// exists, which is what makes creating the key file race-free.
	Link(oldname, newname string) error
	Remove(name string) error
	// Free is the bytes an unprivileged writer may still use on the file
	// system holding dir; an error means unknown.
	Free(dir string) (int64, error)
}

// File is an open file of an FS.
type File interface {
	io.ReadWriteCloser
	Stat() (fs.FileInfo, error)
	Sync() error
}

// OSFS is the operating system's file system.
type OSFS struct{}

// MkdirAll is os.MkdirAll.
func (OSFS) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }

// OpenFile is os.OpenFile.
func (OSFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// ReadDir is os.ReadDir.
func (OSFS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }

// Stat is os.Stat.
func (OSFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }

// Chtimes is os.Chtimes.
func (OSFS) Chtimes(name string, atime, mtime time.Time) error {
	return os.Chtimes(name, atime, mtime)
}

// Rename is os.Rename.
func (OSFS) Rename(oldname, newname string) error { return os.Rename(oldname, newname) }

// Link is os.Link.
func (OSFS) Link(oldname, newname string) error { return os.Link(oldname, newname) }

// Remove is os.Remove.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// Free asks the operating system (statfs) where it can.
func (OSFS) Free(dir string) (int64, error) { return freeBytes(dir) }
