package cache

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// diskFaultFS is the real file system with a script of faults, each set by the
// test that needs it: an operation that fails with a given error,
// writes that keep only their first half yet report success (a torn
// write), a reported free space, and a gate that holds the writer as it
// creates a temporary file. Faults apply to temporary block files (and
// "mkdir" to every MkdirAll), never to reads or to the key file.
type diskFaultFS struct {
	OSFS
	gate    chan struct{} // when set, creating a temporary file waits for it to close
	entered chan struct{} // told, without blocking, when the writer reaches the gate

	mu    sync.Mutex
	fails map[string]error // by operation: mkdir, create, write, sync, chtimes, rename, remove
	tear  bool
	free  int64 // what Free reports; 0 asks the OS
}

var errDiskCrash = errors.New("process killed")

func (f *diskFaultFS) fail(op string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fails == nil {
		f.fails = map[string]error{}
	}
	f.fails[op] = err
}

func (f *diskFaultFS) setFree(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.free = n
}

func (f *diskFaultFS) fault(op, name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.fails[op]; err != nil {
		return &fs.PathError{Op: op, Path: name, Err: err}
	}
	return nil
}

func isDiskTemp(name string) bool { return strings.HasPrefix(filepath.Base(name), tempPrefix) }

// isDiskBlockTemp reports whether name is a temporary file in a fan-out
// directory: a block being written, not the key file being created.
func isDiskBlockTemp(name string) bool {
	return isDiskTemp(name) && isLowerHex(filepath.Base(filepath.Dir(name)), 2)
}

func (f *diskFaultFS) MkdirAll(dir string, perm fs.FileMode) error {
	if err := f.fault("mkdir", dir); err != nil {
		return err
	}
	return f.OSFS.MkdirAll(dir, perm)
}

func (f *diskFaultFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	if !isDiskBlockTemp(name) || flag&os.O_CREATE == 0 {
		return f.OSFS.OpenFile(name, flag, perm)
	}
	if f.gate != nil {
		select {
		case f.entered <- struct{}{}:
		default:
		}
		<-f.gate
	}
	if err := f.fault("create", name); err != nil {
		return nil, err
	}
	file, err := f.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &diskFaultFile{File: file, fs: f, name: name}, nil
}

func (f *diskFaultFS) Chtimes(name string, atime, mtime time.Time) error {
	if isDiskBlockTemp(name) {
		if err := f.fault("chtimes", name); err != nil {
			return err
		}
	}
	return f.OSFS.Chtimes(name, atime, mtime)
}

func (f *diskFaultFS) Rename(oldname, newname string) error {
	if err := f.fault("rename", oldname); err != nil {
		return err
	}
	return f.OSFS.Rename(oldname, newname)
}

func (f *diskFaultFS) Remove(name string) error {
	if isDiskBlockTemp(name) {
		if err := f.fault("remove", name); err != nil {
			return err
		}
	}
	return f.OSFS.Remove(name)
}

func (f *diskFaultFS) Free(dir string) (int64, error) {
	f.mu.Lock()
	free := f.free
	f.mu.Unlock()
	if free != 0 {
		return free, nil
	}
	return f.OSFS.Free(dir)
}

// diskFaultFile is a temporary file of a diskFaultFS.
type diskFaultFile struct {
	File
	fs   *diskFaultFS
	name string
}

func (f *diskFaultFile) Write(p []byte) (int, error) {
	if err := f.fs.fault("write", f.name); err != nil {
		return 0, err
	}
	f.fs.mu.Lock()
	tear := f.fs.tear
	f.fs.mu.Unlock()
	if tear {
		_, err := f.File.Write(p[:len(p)/2])
		return len(p), err
	}
	return f.File.Write(p)
}

func (f *diskFaultFile) Sync() error {
	if err := f.fs.fault("sync", f.name); err != nil {
		return err
	}
	return f.File.Sync()
}

// diskFaultCase is one stored block, a, to damage, beside another, b.
type diskFaultCase struct {
	t    *testing.T
	r    *diskRig
	d    *Disk
	a, b diskBlock
	file []byte // a's file as written
	m    int    // its metadata's length
}

func (c *diskFaultCase) pathA() string { return c.a.path(c.d) }

// rewriteA replaces a's file content in place.
func (c *diskFaultCase) rewriteA(b []byte) {
	c.t.Helper()
	if err := os.WriteFile(c.pathA(), b, 0o600); err != nil {
		c.t.Fatal(err)
	}
}

func (c *diskFaultCase) flip(off int) {
	b := bytes.Clone(c.file)
	b[off] ^= 0x01
	c.rewriteA(b)
}

func TestDiskFaults(t *testing.T) {
	type damage func(c *diskFaultCase) *Disk // returns the Disk to read a from
	flipAt := func(off func(c *diskFaultCase) int) damage {
		return func(c *diskFaultCase) *Disk { c.flip(off(c)); return c.d }
	}
	truncAt := func(n func(c *diskFaultCase) int) damage {
		return func(c *diskFaultCase) *Disk { c.rewriteA(c.file[:n(c)]); return c.d }
	}
	var (
		parse   = func(s DiskStats) uint64 { return s.MissParse }
		auth    = func(s DiskStats) uint64 { return s.MissAuth }
		binding = func(s DiskStats) uint64 { return s.MissBinding }
		expired = func(s DiskStats) uint64 { return s.MissExpired }
	)
	payloadAt := func(c *diskFaultCase) int { return headerLen + c.m + trailerLen }
	cases := []struct {
		name   string
		damage damage
		want   func(*BlockMeta) // changes what Get asks for; nil: a's binding
		reason func(DiskStats) uint64
		keepB  bool // b is untouched and must still hit
	}{
		{"flip magic", flipAt(func(*diskFaultCase) int { return 0 }), nil, parse, true},
		{"flip version", flipAt(func(*diskFaultCase) int { return 8 }), nil, parse, true},
		{"flip metadata length", flipAt(func(*diskFaultCase) int { return 10 }), nil, parse, true},
		{"flip metadata array header", flipAt(func(*diskFaultCase) int { return headerLen }), nil, parse, true},
		{"flip metadata weight hash", flipAt(func(*diskFaultCase) int { return headerLen + 3 }), nil, auth, true},
		{"flip metadata expiry", flipAt(func(c *diskFaultCase) int { return headerLen + c.m - 1 }), nil, auth, true},
		{"flip wrap nonce", flipAt(func(c *diskFaultCase) int { return headerLen + c.m }), nil, auth, true},
		{"flip wrapped key", flipAt(func(c *diskFaultCase) int { return headerLen + c.m + nonceLen + 5 }), nil, auth, true},
		{"flip wrapped key tag", flipAt(func(c *diskFaultCase) int { return headerLen + c.m + nonceLen + wrappedLen - 1 }), nil, auth, true},
		{"flip payload nonce", flipAt(func(c *diskFaultCase) int { return headerLen + c.m + nonceLen + wrappedLen }), nil, auth, true},
		{"flip payload length", flipAt(func(c *diskFaultCase) int { return payloadAt(c) - 8 }), nil, parse, true},
		{"flip payload length top", flipAt(func(c *diskFaultCase) int { return payloadAt(c) - 1 }), nil, parse, true},
		{"flip ciphertext", flipAt(func(c *diskFaultCase) int { return payloadAt(c) + len(c.a.payload)/2 }), nil, auth, true},
		{"flip payload tag", flipAt(func(c *diskFaultCase) int { return len(c.file) - 1 }), nil, auth, true},

		{"truncate to 0", truncAt(func(*diskFaultCase) int { return 0 }), nil, parse, true},
		{"truncate in magic", truncAt(func(*diskFaultCase) int { return 5 }), nil, parse, true},
		{"truncate in header", truncAt(func(*diskFaultCase) int { return headerLen - 1 }), nil, parse, true},
		{"truncate in metadata", truncAt(func(c *diskFaultCase) int { return headerLen + c.m/2 }), nil, parse, true},
		{"truncate in wrapped key", truncAt(func(c *diskFaultCase) int { return headerLen + c.m + 30 }), nil, parse, true},
		{"truncate in payload", truncAt(func(c *diskFaultCase) int { return payloadAt(c) + len(c.a.payload)/2 }), nil, parse, true},
		{"truncate by 1 byte", truncAt(func(c *diskFaultCase) int { return len(c.file) - 1 }), nil, parse, true},
		{"extend by 1 byte", func(c *diskFaultCase) *Disk { c.rewriteA(append(bytes.Clone(c.file), 0)); return c.d }, nil, parse, true},

		{"swap with another block's file", func(c *diskFaultCase) *Disk {
			fb, err := os.ReadFile(c.b.path(c.d))
			if err != nil {
				c.t.Fatal(err)
			}
			c.rewriteA(fb)
			if err := os.WriteFile(c.b.path(c.d), c.file, 0o600); err != nil {
				c.t.Fatal(err)
			}
			return c.d
		}, nil, auth, false},
		{"another block's file renamed to its name", func(c *diskFaultCase) *Disk {
			if err := os.Rename(c.b.path(c.d), c.pathA()); err != nil {
				c.t.Fatal(err)
			}
			return c.d
		}, nil, auth, false},
		{"key file replaced", func(c *diskFaultCase) *Disk {
			c.d.Close()
			other := sha256.Sum256([]byte("another key"))
			if err := os.WriteFile(filepath.Join(c.r.root, "kek"), other[:], 0o600); err != nil {
				c.t.Fatal(err)
			}
			d := c.r.open()
			// Names derive from the key: under the new one, a's file is
			// simply not found (it ages out like any unused file)...
			c.a.mustMiss(c.t, d)
			if s := d.Stats(); s.MissAbsent != 1 || !c.a.onDisk(c.t, c.d) {
				c.t.Fatalf("old file under a new key: %+v", s)
			}
			// ...and moved to the name the new key gives, it fails to open.
			if err := os.MkdirAll(filepath.Dir(c.a.path(d)), 0o700); err != nil {
				c.t.Fatal(err)
			}
			if err := os.Rename(c.pathA(), c.a.path(d)); err != nil {
				c.t.Fatal(err)
			}
			return d
		}, nil, auth, false},
		{"copied from another model's directory", func(c *diskFaultCase) *Disk {
			opt := c.r.opt
			opt.Dir = filepath.Join(c.r.root, "ba9876543210")
			other, err := OpenDisk(opt)
			if err != nil {
				c.t.Fatal(err)
			}
			defer other.Close()
			theirs := c.a
			theirs.meta.WeightHash = sha256.Sum256([]byte("other weights"))
			theirs.payload = bytes.Repeat([]byte{0xEE}, len(c.a.payload))
			theirs.put(c.t, other)
			other.Flush()
			fb, err := os.ReadFile(theirs.path(other))
			if err != nil {
				c.t.Fatal(err)
			}
			c.rewriteA(fb)
			return c.d
		}, nil, binding, true},
		{"copied from another scope", func(c *diskFaultCase) *Disk {
			theirs := newDiskBlock(Scope(sha256.Sum256([]byte("other tenant"))), c.a.chain, len(c.a.payload))
			theirs.meta = c.a.meta
			theirs.put(c.t, c.d)
			c.d.Flush()
			fb, err := os.ReadFile(theirs.path(c.d))
			if err != nil {
				c.t.Fatal(err)
			}
			c.rewriteA(fb)
			return c.d
		}, nil, auth, true},
		{"a directory in its place", func(c *diskFaultCase) *Disk {
			if err := os.Remove(c.pathA()); err != nil {
				c.t.Fatal(err)
			}
			if err := os.Mkdir(c.pathA(), 0o700); err != nil {
				c.t.Fatal(err)
			}
			return c.d
		}, nil, parse, true},

		{"other weight hash", nil, func(m *BlockMeta) { m.WeightHash[0] ^= 1 }, binding, true},
		{"other layout epoch", nil, func(m *BlockMeta) { m.LayoutEpoch++ }, binding, true},
		{"other block size", nil, func(m *BlockMeta) { m.BlockTokens = 128 }, binding, true},
		{"other prefix length", nil, func(m *BlockMeta) { m.Tokens += BlockTokens }, binding, true},
		{"other prefix", nil, func(m *BlockMeta) { m.PrefixSHA[31] ^= 1 }, binding, true},

		{"expired", func(c *diskFaultCase) *Disk { c.r.clk.Add(DefaultDiskTTL); return c.d }, nil, expired, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newDiskRig(t)
			c := &diskFaultCase{t: t, r: r, d: r.open(),
				a: newDiskBlock(NoScope, 1, 50_000), b: newDiskBlock(NoScope, 2, 50_000)}
			c.a.put(t, c.d)
			c.b.put(t, c.d)
			c.d.Flush()
			var err error
			if c.file, err = os.ReadFile(c.pathA()); err != nil {
				t.Fatal(err)
			}
			c.m = int(c.file[10]) | int(c.file[11])<<8

			d := c.d
			if tc.damage != nil {
				d = tc.damage(c)
			}
			want := c.a.meta
			if tc.want != nil {
				tc.want(&want)
			}
			before := d.Stats()
			got, ok := d.Get(c.a.scope, c.a.chain, want)
			if ok || got != nil {
				t.Fatalf("Get = %d bytes, %v; want a miss", len(got), ok)
			}
			s := d.Stats()
			if tc.reason(s)-tc.reason(before) != 1 || s.Misses-before.Misses != 1 {
				t.Fatalf("miss not counted under its reason: before %+v, after %+v", before, s)
			}
			if _, err := os.Lstat(c.a.path(d)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("bad file kept: %v", err)
			}
			c.a.mustMiss(t, d)
			if s := d.Stats(); s.MissAbsent-before.MissAbsent != 1 {
				t.Fatalf("second Get not absent: %+v", s)
			}
			if tc.keepB {
				c.b.mustHit(t, d)
			}
		})
	}
}

func TestDiskTornWrite(t *testing.T) {
	// A file system that loses the second half of a write yet reports
	// success: the store renames a torn file into place, and Get refuses it.
	r := newDiskRig(t)
	fsys := &diskFaultFS{tear: true}
	r.opt.FS = fsys
	d := r.open()
	a := newDiskBlock(NoScope, 1, 40_000)
	a.put(t, d)
	d.Flush()
	if s := d.Stats(); s.Writes != 1 || !a.onDisk(t, d) {
		t.Fatalf("torn write not in place: %+v", s)
	}
	a.mustMiss(t, d)
	if s := d.Stats(); s.MissParse != 1 || s.Files != 0 || s.Bytes != 0 || a.onDisk(t, d) {
		t.Fatalf("torn file: %+v, on disk %v", s, a.onDisk(t, d))
	}
}

func TestDiskCrashLeavesTempFile(t *testing.T) {
	// The process dies between writing the temporary file and renaming it:
	// nothing is left but the temporary file, which no Get reads and which
	// an open an hour later removes.
	r := newDiskRig(t)
	fsys := &diskFaultFS{}
	r.opt.FS = fsys
	d := r.open()
	fsys.fail("rename", errDiskCrash)
	fsys.fail("remove", errDiskCrash)
	a := newDiskBlock(NoScope, 1, 40_000)
	a.put(t, d)
	d.Flush()
	left := diskFilesUnder(t, r.opt.Dir)
	if len(left) != 1 || !isDiskTemp(left[0]) {
		t.Fatalf("files %q, want one temporary file", left)
	}
	a.mustMiss(t, d)
	if s := d.Stats(); s.MissAbsent != 1 || s.WriteErrors != 1 || s.Files != 0 {
		t.Fatalf("stats %+v", s)
	}
	d.Close()

	r.opt.FS = nil
	r.clk.Add(30 * time.Minute) // young: may be another process's write
	d = r.open()
	if s := d.Stats(); s.Swept != 0 || s.Files != 0 || len(diskFilesUnder(t, r.opt.Dir)) != 1 {
		t.Fatalf("young temporary file: %+v", s)
	}
	a.mustMiss(t, d)
	d.Close()

	r.clk.Add(time.Hour)
	d = r.open()
	if s := d.Stats(); s.Swept != 1 || len(diskFilesUnder(t, r.opt.Dir)) != 0 {
		t.Fatalf("old temporary file: %+v, files %q", s, diskFilesUnder(t, r.opt.Dir))
	}
}

func TestDiskOpenSweepsMalformed(t *testing.T) {
	r := newDiskRig(t)
	d := r.open()
	a, b := newDiskBlock(NoScope, 1, 1000), newDiskBlock(NoScope, 2, 1000)
	a.put(t, d)
	b.put(t, d)
	d.Flush()
	d.Close()
	if err := os.WriteFile(a.path(d), []byte("not a block"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Files the store does not name are not its to touch.
	stranger := filepath.Join(r.opt.Dir, "ab", "README")
	if err := os.MkdirAll(filepath.Dir(stranger), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stranger, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d = r.open()
	if s := d.Stats(); s.Swept != 1 || s.Files != 1 || a.onDisk(t, d) {
		t.Fatalf("stats %+v", s)
	}
	b.mustHit(t, d)
	if _, err := os.Stat(stranger); err != nil {
		t.Fatal(err)
	}
}
