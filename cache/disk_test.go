package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/benbjohnson/clock"
)

// diskTestStart is where the tests' mock clock starts: a fixed time, carried
// into file mtimes, well after any real mtime a temporary file gets.
var diskTestStart = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

var diskTestWeights = sha256.Sum256([]byte("test weights"))

// diskRig is one model directory under a temporary root (which holds the
// key file), with a mock clock and options a test may change before open.
type diskRig struct {
	t    *testing.T
	root string
	clk  *clock.Mock
	opt  DiskOptions
}

func newDiskRig(t *testing.T) *diskRig {
	t.Helper()
	root := t.TempDir()
	clk := clock.NewMock()
	clk.Set(diskTestStart)
	return &diskRig{t: t, root: root, clk: clk, opt: DiskOptions{
		Dir:     filepath.Join(root, "0123456789ab"),
		Budget:  1 << 30,
		MinFree: -1,
		Clock:   clk,
	}}
}

// open opens the rig's directory; the Disk is closed at cleanup.
func (r *diskRig) open() *Disk {
	r.t.Helper()
	d, err := OpenDisk(r.opt)
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { d.Close() })
	return d
}

// diskBlock is a block with its binding and a payload derived from its
// scope and chain key.
type diskBlock struct {
	scope   Scope
	chain   uint64
	meta    BlockMeta
	payload []byte
}

func newDiskBlock(scope Scope, chain uint64, size int) diskBlock {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], chain)
	copy(seed[8:], scope[:])
	payload := make([]byte, size)
	mrand.NewChaCha8(seed).Read(payload)
	return diskBlock{scope: scope, chain: chain, payload: payload, meta: BlockMeta{
		WeightHash:  diskTestWeights,
		LayoutEpoch: 7,
		BlockTokens: BlockTokens,
		Tokens:      int(chain%16+1) * BlockTokens,
		PrefixSHA:   sha256.Sum256(seed[:]),
	}}
}

func (b diskBlock) put(t *testing.T, d *Disk) {
	t.Helper()
	if !d.Put(b.scope, b.chain, b.meta, bytes.Clone(b.payload)) {
		t.Fatalf("Put(%#x) dropped: %+v", b.chain, d.Stats())
	}
}

func (b diskBlock) mustHit(t *testing.T, d *Disk) {
	t.Helper()
	got, ok := d.Get(b.scope, b.chain, b.meta)
	if !ok {
		t.Fatalf("Get(%#x) missed: %+v", b.chain, d.Stats())
	}
	if !bytes.Equal(got, b.payload) {
		t.Fatalf("Get(%#x) returned %d bytes that differ from the %d put", b.chain, len(got), len(b.payload))
	}
}

func (b diskBlock) mustMiss(t *testing.T, d *Disk) {
	t.Helper()
	if got, ok := d.Get(b.scope, b.chain, b.meta); ok || got != nil {
		t.Fatalf("Get(%#x) = %d bytes, %v; want a miss", b.chain, len(got), ok)
	}
}

// path is where d keeps b's file.
func (b diskBlock) path(d *Disk) string { return d.path(d.keys.fileName(b.scope, b.chain)) }

func (b diskBlock) onDisk(t *testing.T, d *Disk) bool {
	t.Helper()
	_, err := os.Stat(b.path(d))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// diskFilesUnder lists the regular files under dir, relative to it.
func diskFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDiskRoundTrip(t *testing.T) {
	r := newDiskRig(t)
	d := r.open()
	other := Scope(sha256.Sum256([]byte("tenant")))
	blocks := []diskBlock{
		newDiskBlock(NoScope, 1, 300_000),
		newDiskBlock(NoScope, 2, 1),
		newDiskBlock(other, 1, 70_000),
		newDiskBlock(other, 3, 0),
	}
	for _, b := range blocks {
		b.put(t, d)
	}
	d.Flush()
	for _, b := range blocks {
		b.mustHit(t, d)
	}
	newDiskBlock(NoScope, 3, 10).mustMiss(t, d)
	s := d.Stats()
	if s.Writes != 4 || s.Hits != 4 || s.Misses != 1 || s.MissAbsent != 1 || s.Files != 4 || s.Dropped != 0 {
		t.Fatalf("stats %+v", s)
	}
	var want int64
	for _, b := range blocks {
		info, err := os.Stat(b.path(d))
		if err != nil {
			t.Fatal(err)
		}
		want += info.Size()
	}
	if s.Bytes != want {
		t.Fatalf("Bytes %d, files hold %d", s.Bytes, want)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// A restart: a new Disk over the same directory.
	d = r.open()
	if s := d.Stats(); s.Files != 4 || s.Bytes != want {
		t.Fatalf("reopened index %+v, want 4 files of %d bytes", s, want)
	}
	for _, b := range blocks {
		b.mustHit(t, d)
	}
}

func TestDiskKeyFile(t *testing.T) {
	r := newDiskRig(t)
	d := r.open()
	kek := filepath.Join(r.root, "kek")
	info, err := os.Stat(kek)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size() != kekLen || info.Mode().Perm() != 0o600 {
		t.Fatalf("key file %d bytes, mode %v; want %d, 0600", info.Size(), info.Mode().Perm(), kekLen)
	}
	if info, err := os.Stat(r.opt.Dir); err != nil || info.Mode().Perm() != 0o700 {
		t.Fatalf("model directory: %v, %v; want mode 0700", info.Mode().Perm(), err)
	}
	d.Close()
	if left := diskFilesUnder(t, r.root); len(left) != 1 || left[0] != "kek" {
		t.Fatalf("files after creating the key: %q", left)
	}

	good, err := os.ReadFile(kek)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		setup func() error
	}{
		{"short", func() error { return os.WriteFile(kek, good[:31], 0o600) }},
		{"long", func() error { return os.WriteFile(kek, append(good, 0), 0o600) }},
		{"empty", func() error { return os.WriteFile(kek, nil, 0o600) }},
		{"open to others", func() error {
			if err := os.WriteFile(kek, good, 0o600); err != nil {
				return err
			}
			return os.Chmod(kek, 0o644)
		}},
		{"directory", func() error { return os.Mkdir(kek, 0o700) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.RemoveAll(kek)
			if err := tc.setup(); err != nil {
				t.Fatal(err)
			}
			d, err := OpenDisk(r.opt)
			if !errors.Is(err, ErrDiskKey) {
				if d != nil {
					d.Close()
				}
				t.Fatalf("OpenDisk = %v, want ErrDiskKey", err)
			}
		})
	}
}

func TestDiskSlidingTTL(t *testing.T) {
	r := newDiskRig(t)
	r.opt.TTL = time.Minute
	d := r.open()
	a, b := newDiskBlock(NoScope, 1, 1000), newDiskBlock(NoScope, 2, 1000)
	a.put(t, d)
	b.put(t, d)
	d.Flush()

	// Each hit restarts a's lifetime; b, never read, runs out.
	r.clk.Add(50 * time.Second)
	a.mustHit(t, d)
	r.clk.Add(50 * time.Second)
	a.mustHit(t, d)
	b.mustMiss(t, d)
	if s := d.Stats(); s.MissExpired != 1 || b.onDisk(t, d) {
		t.Fatalf("expired b: %+v, on disk %v", s, b.onDisk(t, d))
	}

	// The last use survives a restart through the file's mtime.
	d.Close()
	r.clk.Add(50 * time.Second)
	d = r.open()
	a.mustHit(t, d)

	// Not used for a whole TTL: expired, and a restart reaps it unread.
	d.Close()
	r.clk.Add(time.Minute)
	d = r.open()
	if s := d.Stats(); s.Expired != 1 || s.Files != 0 || a.onDisk(t, d) {
		t.Fatalf("reopened after the TTL: %+v", s)
	}
	a.mustMiss(t, d)
}

func TestDiskRecordedExpiryIsAFloor(t *testing.T) {
	// A file written under a longer TTL keeps the lifetime its
	// authenticated metadata records even when the TTL is shortened.
	r := newDiskRig(t)
	r.opt.TTL = time.Hour
	d := r.open()
	a := newDiskBlock(NoScope, 1, 100)
	a.put(t, d)
	d.Flush()
	d.Close()

	r.opt.TTL = time.Minute
	r.clk.Add(30 * time.Minute)
	d = r.open()
	a.mustHit(t, d)
	r.clk.Add(31 * time.Minute)
	a.mustMiss(t, d)
	if s := d.Stats(); s.MissExpired != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDiskBudget(t *testing.T) {
	r := newDiskRig(t)
	const payload = 10_000
	blocks := make([]diskBlock, 6)
	for i := range blocks {
		blocks[i] = newDiskBlock(NoScope, uint64(i), payload)
	}
	// One file's size: the payload plus the format's overhead.
	probe := newDiskRig(t)
	pd := probe.open()
	blocks[0].put(t, pd)
	pd.Flush()
	size := pd.Stats().Bytes
	pd.Close()

	r.opt.Budget = 3*size + size/2
	d := r.open()
	step := func(b diskBlock) {
		b.put(t, d)
		d.Flush()
		r.clk.Add(time.Second)
	}
	present := func(want ...int) {
		t.Helper()
		var got []int
		for i, b := range blocks {
			if b.onDisk(t, d) {
				got = append(got, i)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("blocks on disk %v, want %v", got, want)
		}
		if s := d.Stats(); s.Files != len(want) || s.Bytes != int64(len(want))*size || s.Bytes > s.Budget {
			t.Fatalf("stats %+v with %d files of %d bytes", s, len(want), size)
		}
	}

	step(blocks[0])
	step(blocks[1])
	step(blocks[2])
	present(0, 1, 2)
	blocks[0].mustHit(t, d) // now 1 is the least recently used
	r.clk.Add(time.Second)
	step(blocks[3])
	present(0, 2, 3)
	if s := d.Stats(); s.Evicted != 1 {
		t.Fatalf("stats %+v", s)
	}

	// A Put of a block already on disk refreshes it instead of writing.
	step(blocks[2])
	if s := d.Stats(); s.Refreshed != 1 || s.Writes != 4 {
		t.Fatalf("stats %+v", s)
	}

	// The LRU order survives a restart: 0 (hit) is now older than 3 and 2.
	d.Close()
	d = r.open()
	step(blocks[4])
	present(2, 3, 4)

	// Larger than the whole budget: dropped at once.
	big := newDiskBlock(NoScope, 99, int(r.opt.Budget))
	if d.Put(big.scope, big.chain, big.meta, big.payload) {
		t.Fatal("Put over the budget accepted")
	}
	if s := d.Stats(); s.DropTooBig != 1 {
		t.Fatalf("stats %+v", s)
	}

	// A smaller budget at open evicts down to it.
	d.Close()
	r.opt.Budget = size + maxMetaLen // room for one file, and Put's bound of it
	d = r.open()
	present(4)

	// Expired files are reaped before a write.
	r.clk.Add(DefaultDiskTTL)
	step(blocks[5])
	present(5)
	if s := d.Stats(); s.Expired != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDiskDefaultBudget(t *testing.T) {
	r := newDiskRig(t)
	r.opt.Budget = 0
	r.opt.FS = &diskFaultFS{free: 4 << 30}
	if s := r.open().Stats(); s.Budget != 2<<30 {
		t.Fatalf("budget %d with 4 GiB free, want 2 GiB", s.Budget)
	}
	r.opt.FS = &diskFaultFS{free: 100 << 30}
	if s := r.open().Stats(); s.Budget != DefaultDiskBudget {
		t.Fatalf("budget %d with 100 GiB free, want %d", s.Budget, DefaultDiskBudget)
	}
}

func TestDiskNothingInClear(t *testing.T) {
	r := newDiskRig(t)
	d := r.open()
	tokens := make([]byte, 0, 4*BlockTokens)
	for i := range BlockTokens {
		tokens = binary.LittleEndian.AppendUint32(tokens, uint32(0x5A000000+i*7919))
	}
	scopes := []Scope{NoScope, Scope(sha256.Sum256([]byte("tenant a"))), Scope(sha256.Sum256([]byte("tenant b")))}
	var blocks []diskBlock
	for i, scope := range scopes {
		for j, chain := range []uint64{0x0123456789abcdef, 0xfedcba9876543210, 0x5eed5eed12345678} {
			b := newDiskBlock(scope, chain, 0)
			// The payload is the tokens themselves, as KV tensors of an
			// embedding-free model would carry them, among other bytes.
			b.payload = append(bytes.Repeat([]byte{byte(i), byte(j)}, 1000), bytes.Repeat(tokens, 4)...)
			b.meta.PrefixSHA = sha256.Sum256(append(scope[:], tokens...))
			b.meta.Tokens = 2 * BlockTokens
			b.put(t, d)
			blocks = append(blocks, b)
		}
	}
	d.Flush()
	for _, b := range blocks {
		b.mustHit(t, d)
	}

	var secrets [][]byte // no file may contain any of these
	var names []string   // no file name may contain any of these
	for i := 0; i+32 <= len(tokens); i += 4 {
		secrets = append(secrets, tokens[i:i+32]) // every run of 8 tokens
	}
	for _, b := range blocks {
		secrets = append(secrets, b.meta.PrefixSHA[:], binary.LittleEndian.AppendUint64(nil, b.chain))
		names = append(names, fmt.Sprintf("%016x", b.chain), fmt.Sprintf("%x", b.meta.PrefixSHA))
		if b.scope != NoScope {
			secrets = append(secrets, b.scope[:])
			names = append(names, fmt.Sprintf("%x", b.scope))
		}
	}
	names = append(names, fmt.Sprintf("%x", diskTestWeights))

	files := diskFilesUnder(t, r.root)
	if len(files) != len(blocks)+1 {
		t.Fatalf("files %q, want %d blocks and the key", files, len(blocks))
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(r.root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secrets {
			if i := bytes.Index(b, s); i >= 0 {
				t.Fatalf("%s holds %x in clear at %d", f, s, i)
			}
		}
		for _, n := range names {
			if strings.Contains(f, n) {
				t.Fatalf("file name %s contains %s", f, n)
			}
		}
		if info, err := os.Stat(filepath.Join(r.root, f)); err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, %v; want 0600", f, info.Mode().Perm(), err)
		}
	}
}

func TestDiskENOSPC(t *testing.T) {
	for _, op := range []string{"mkdir", "create", "write", "sync", "chtimes", "rename"} {
		t.Run(op, func(t *testing.T) {
			r := newDiskRig(t)
			fsys := &diskFaultFS{}
			r.opt.FS = fsys
			r.opt.Cooldown = 10 * time.Minute
			d := r.open()
			a, b, c := newDiskBlock(NoScope, 1, 5000), newDiskBlock(NoScope, 2, 5000), newDiskBlock(NoScope, 3, 5000)

			fsys.fail(op, syscall.ENOSPC)
			a.put(t, d)
			d.Put(b.scope, b.chain, b.meta, b.payload) // queued or refused: dropped either way
			d.Flush()
			s := d.Stats()
			if s.WriteErrors != 1 || s.Cooldowns != 1 || s.DropCooldown != 1 || s.Writes != 0 || s.Dropped != 2 {
				t.Fatalf("after ENOSPC: %+v", s)
			}
			if left := diskFilesUnder(t, r.opt.Dir); len(left) != 0 {
				t.Fatalf("files left after ENOSPC: %q", left)
			}

			fsys.fail(op, nil)
			r.clk.Add(r.opt.Cooldown - time.Second)
			if d.Put(c.scope, c.chain, c.meta, c.payload) {
				t.Fatal("Put accepted during the cooldown")
			}
			r.clk.Add(time.Second)
			c.put(t, d)
			d.Flush()
			c.mustHit(t, d)
			if s := d.Stats(); s.Writes != 1 || s.DropCooldown != 2 || s.Cooldowns != 1 {
				t.Fatalf("after the cooldown: %+v", s)
			}
		})
	}
}

func TestDiskWriteErrorWithoutCooldown(t *testing.T) {
	r := newDiskRig(t)
	fsys := &diskFaultFS{}
	r.opt.FS = fsys
	d := r.open()
	a, b := newDiskBlock(NoScope, 1, 100), newDiskBlock(NoScope, 2, 100)
	fsys.fail("write", syscall.EIO)
	a.put(t, d)
	d.Flush()
	fsys.fail("write", nil)
	b.put(t, d)
	d.Flush()
	a.mustMiss(t, d)
	b.mustHit(t, d)
	if s := d.Stats(); s.WriteErrors != 1 || s.Cooldowns != 0 || s.Writes != 1 {
		t.Fatalf("stats %+v", s)
	}
	if left := diskFilesUnder(t, r.opt.Dir); len(left) != 1 {
		t.Fatalf("files %q, want b's only", left)
	}
}

func TestDiskLowFreeSpace(t *testing.T) {
	r := newDiskRig(t)
	fsys := &diskFaultFS{free: 2 << 30}
	r.opt.FS = fsys
	r.opt.MinFree = 1 << 30
	d := r.open()
	a, b := newDiskBlock(NoScope, 1, 100), newDiskBlock(NoScope, 2, 100)
	a.put(t, d)
	d.Flush()
	fsys.setFree(1<<30 + 100) // this write would go below the floor
	b.put(t, d)
	d.Flush()
	if s := d.Stats(); s.Writes != 1 || s.Cooldowns != 1 || s.DropCooldown != 1 || s.WriteErrors != 0 {
		t.Fatalf("stats %+v", s)
	}
	if d.Put(b.scope, b.chain, b.meta, b.payload) {
		t.Fatal("Put accepted during the cooldown")
	}
	fsys.setFree(2 << 30)
	r.clk.Add(DefaultDiskCooldown)
	b.put(t, d)
	d.Flush()
	b.mustHit(t, d)
}

func TestDiskQueueFull(t *testing.T) {
	r := newDiskRig(t)
	fsys := &diskFaultFS{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
	r.opt.FS = fsys
	r.opt.Queue = 4
	d := r.open()
	blocks := make([]diskBlock, 6)
	for i := range blocks {
		blocks[i] = newDiskBlock(NoScope, uint64(i), 1000)
	}

	blocks[0].put(t, d)
	<-fsys.entered // the writer holds block 0, blocked in the file system
	for _, b := range blocks[1:5] {
		b.put(t, d)
	}
	if d.Put(blocks[5].scope, blocks[5].chain, blocks[5].meta, blocks[5].payload) {
		t.Fatal("Put into a full queue accepted")
	}
	if s := d.Stats(); s.DropFull != 1 || s.Dropped != 1 || s.Writes != 0 {
		t.Fatalf("stats %+v", s)
	}

	close(fsys.gate)
	d.Flush()
	for _, b := range blocks[:5] {
		b.mustHit(t, d)
	}
	blocks[5].mustMiss(t, d)
	if s := d.Stats(); s.Writes != 5 || s.DropFull != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func TestDiskClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newDiskRig(t)
		fsys := &diskFaultFS{gate: make(chan struct{}), entered: make(chan struct{}, 1)}
		r.opt.FS = fsys
		d := r.open()
		a, b, c := newDiskBlock(NoScope, 1, 100), newDiskBlock(NoScope, 2, 100), newDiskBlock(NoScope, 3, 100)
		a.put(t, d)
		<-fsys.entered
		b.put(t, d)
		closed := make(chan error)
		go func() { closed <- d.Close() }()
		synctest.Wait() // Close has begun: it waits for the writer

		if d.Put(c.scope, c.chain, c.meta, c.payload) {
			t.Fatal("Put after Close accepted")
		}
		close(fsys.gate)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		d.Flush() // returns: nothing left to wait for
		a.mustHit(t, d)
		b.mustMiss(t, d)
		if s := d.Stats(); s.Writes != 1 || s.DropClosed != 2 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestDiskConcurrent(t *testing.T) {
	r := newDiskRig(t)
	d := r.open()
	const workers, per = 4, 16
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				b := newDiskBlock(NoScope, uint64(i), 2000+i)
				if w%2 == 0 {
					d.Put(b.scope, b.chain, b.meta, bytes.Clone(b.payload))
				}
				if got, ok := d.Get(b.scope, b.chain, b.meta); ok && !bytes.Equal(got, b.payload) {
					t.Errorf("block %d: wrong payload", i)
				}
			}
		})
	}
	wg.Wait()
	d.Flush()
	s := d.Stats()
	if s.Writes+s.Refreshed+s.Dropped != 2*per || s.MissAuth+s.MissParse+s.MissBinding+s.MissIO != 0 {
		t.Fatalf("stats %+v", s)
	}
	for i := range per {
		if b := newDiskBlock(NoScope, uint64(i), 2000+i); b.onDisk(t, d) {
			b.mustHit(t, d)
		}
	}
}
