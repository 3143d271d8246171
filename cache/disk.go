package cache

// The SSD tier: an encrypted, crash-safe, budgeted store of full blocks,
// so that cached prefixes survive a restart. Disk owns one model's
// directory; it never returns a payload other than the exact bytes Put
// stored for the same (scope, chain key) and binding, only that or a miss.
//
// Layout. Dir is the model's directory (the caller names it by the first
// 12 hex digits of SHA-256 of the model id); it holds one file per block at
// Dir/<n[:2]>/<n>, where n is the 64 hex digits of HMAC-SHA256 of (scope,
// chain key) under a key derived from the key-encryption key (KEK). The
// two-digit fan-out keeps directories small. Temporary files are
// <subdir>/.tmp-<random>. Directories are created 0700, files 0600.
//
// Crypto. The KEK is 32 random bytes in KeyFile (0600, created on first
// use, shared by the models under one parent directory). Three keys are
// derived from it as HMAC-SHA256(KEK, label): the name key, the wrap key
// and a prefix-tag key. Each file has its own random 32-byte data key,
// sealed with AES-256-GCM under the wrap key and stored in the file; the
// payload is sealed with AES-256-GCM under the data key. Both seals
// authenticate, as additional data, the file's header and metadata and the
// scope and chain key the name stands for, so a file edited, truncated,
// swapped with another or renamed to another block's name fails to open.
// Under a new KEK every name changes: old files are not found (they age
// out, least recently used, like any unused file) and, if moved to a new
// name, fail to open. The byte layout is in disk_format.go.
//
// Metadata. The canonical msgpack of the binding (weight hash, layout
// epoch, block tokens, prefix tokens, a keyed tag of PrefixSHA, expiry) is
// stored in clear and authenticated. A hit requires an authentic file
// whose binding equals the request's: another model's or layout's file, or
// a chain-key collision with another prefix, is a miss.
//
// What is visible on disk without the KEK: how many blocks there are and
// their sizes (so the payload's length), their times (mtime is the last
// use), and each block's weight hash, layout epoch, block size, prefix
// length and expiry. Not visible: token ids, chain keys, scopes, prefix
// hashes (only a keyed tag of them), payloads. The model's id appears only
// hashed, in the directory name the caller chooses.
//
// Lifetime (sliding TTL). A write records expiry = now + TTL in the
// metadata and sets the file's mtime to now; a hit sets the mtime to now.
// A file is expired once the clock passes max(recorded expiry, mtime +
// TTL): the recorded expiry is the authenticated lifetime the writer
// granted, the mtime extends it on use. Touching the mtime by hand can
// only keep an authentic block longer, never make a wrong one valid.
// Expired files are removed when a Get finds them, at open and before each
// write (least recently used first).
//
// Atomicity. A write goes to a temporary file in the block's directory,
// which is fsynced, closed, renamed over the final name, then the directory
// is fsynced (best effort: a failure there is ignored, the rename is
// done). A crash leaves either the old file, the new one or a stray
// temporary file; temporary files older than an hour are removed at open
// (younger ones may belong to another process writing the same directory).
// A torn final file (a file system that lost writes) fails its length
// check or authentication like any other damage.
//
// Budget. An in-memory index of every block file (size and last use),
// rebuilt at open from the directory (file sizes, mtimes and each file's
// metadata), keeps the indexed bytes within the budget by removing least
// recently used files before each write. A Put larger than the whole
// budget is dropped.
//
// Write-behind. Put only enqueues (a bounded queue; full means dropped,
// never blocked) and one goroutine encrypts and writes. ENOSPC from any
// step of a write, or free space under the floor, stops writes for the
// cooldown: queued and new blocks are dropped and counted until the clock
// passes it.
//
// Failure is a miss. Every Get failure (absent, expired, malformed,
// unauthentic, bound to something else, unreadable) returns a miss and
// counts its reason; a file that was read and refused is deleted (unless
// it was replaced meanwhile), so the next Put writes it afresh. Before a
// file authenticates, only its framing and metadata are parsed, every
// length checked against the bytes present, and no allocation exceeds the
// file's size (itself bounded).
//
// Lock order: Disk.mu is the only lock. File I/O that must agree with the
// index (renames into place, removals, the hit's mtime update) happens
// under it; reading, encrypting and writing temporary files do not.

import (
	"cmp"
	"container/list"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/benbjohnson/clock"
)

// BlockMeta binds a block file to the model and the prefix it was computed
// from. Get returns a block only when all fields but Expiry equal the
// stored ones.
type BlockMeta struct {
	WeightHash  [32]byte // fingerprint of the model's weights
	LayoutEpoch uint32   // bumped when what a block stores changes meaning
	BlockTokens int      // tokens per block (BlockTokens)
	Tokens      int      // tokens of the prefix up to the end of this block
	// PrefixSHA is the PrefixSHA of the scope and every token up to the
	// end of this block.
	PrefixSHA [32]byte
	// Expiry is unix nanoseconds; Put ignores it (the store sets it from
	// its clock and TTL) and Get does not compare it.
	Expiry int64
}

// DiskOptions configure OpenDisk. Zero values mean the documented default.
type DiskOptions struct {
	// Dir is the model's directory, created 0700 with its parents.
	Dir string
	// KeyFile holds the 32-byte key-encryption key; it is created 0600
	// with random bytes on first use. Default: "kek" beside Dir, so that
	// every model's directory under one parent shares it.
	KeyFile string
	// Budget bounds the bytes of block files. Default: min(20 GiB, half
	// the free space at open, counting this directory's files as free).
	Budget int64
	// MinFree is the free space under which writes stop for Cooldown.
	// Default 1 GiB; negative: no floor.
	MinFree int64
	// TTL is a block's sliding lifetime. Default 900 s.
	TTL time.Duration
	// Queue bounds the blocks waiting to be written. Default 64.
	Queue int
	// Cooldown is how long writes stop after ENOSPC or low free space.
	// Default 10 minutes.
	Cooldown time.Duration
	// Clock is the time source of expiry, cooldown and mtimes. Default:
	// the wall clock.
	Clock clock.Clock
	// FS is the file system. Default: OSFS.
	FS FS
}

// Defaults of DiskOptions.
const (
	DefaultDiskBudget   = 20 << 30
	DefaultDiskMinFree  = 1 << 30
	DefaultDiskTTL      = 900 * time.Second
	DefaultDiskQueue    = 64
	DefaultDiskCooldown = 10 * time.Minute
)

const (
	tempPrefix = ".tmp-"
	// tempMaxAge is when a temporary file is surely abandoned.
	tempMaxAge = time.Hour
	kekLen     = 32
)

// ErrDiskKey is returned by OpenDisk when the key file cannot be read,
// created or trusted (wrong size, not a regular file, readable by others):
// the caller should disable the SSD tier and say so.
var ErrDiskKey = errors.New("prefix cache key file unusable")

// DiskStats counts what the SSD tier did.
type DiskStats struct {
	// Hits is Gets that returned a payload; Misses is those that did not,
	// the sum of the Miss counts.
	Hits, Misses uint64
	// MissAbsent: no file. MissExpired: authentic but past its lifetime.
	// MissAuth: failed authentication (damaged, torn, swapped, renamed,
	// another key). MissParse: malformed (magic, version, lengths,
	// metadata, truncated, too large). MissBinding: authentic but written
	// for another weight hash, layout epoch, block size or prefix. MissIO:
	// the file could not be read.
	MissAbsent, MissExpired, MissAuth, MissParse, MissBinding, MissIO uint64

	// Writes is blocks written. Refreshed is Puts of a block already on
	// disk, whose lifetime was extended instead of rewriting it.
	Writes, Refreshed uint64
	// Dropped is Puts not written: the sum of the Drop counts and
	// WriteErrors.
	Dropped uint64
	// DropFull: the queue was full. DropCooldown: writes were stopped.
	// DropClosed: Put after Close, or still queued at Close. DropTooBig:
	// larger than the budget.
	DropFull, DropCooldown, DropClosed, DropTooBig uint64
	// WriteErrors is writes that failed; their temporary files are removed.
	WriteErrors uint64
	// Cooldowns is the times writes were stopped (ENOSPC or free space
	// under the floor).
	Cooldowns uint64
	// Evicted is files removed to stay within the budget; Expired is
	// expired files removed outside Get; Swept is malformed block files
	// and abandoned temporary files removed at open.
	Evicted, Expired, Swept uint64

	// Files and Bytes are the block files indexed now; Budget bounds Bytes.
	Files         int
	Bytes, Budget int64
}

// Disk is the SSD tier of one model. Its methods may be called from any
// goroutine.
type Disk struct {
	dir      string
	fs       FS
	clock    clock.Clock
	keys     *diskKeys
	ttl      time.Duration
	cooldown time.Duration
	minFree  int64
	queue    chan diskJob
	stopped  chan struct{} // closed when the writer has returned

	mu                 sync.Mutex
	finishedCond       *sync.Cond // broadcast as the writer finishes jobs
	closed             bool
	enqueued, finished uint64 // jobs; Flush waits for finished to catch up
	coolUntil          time.Time
	budget             int64
	files              map[string]*list.Element // by name, of lru
	lru                *list.List               // *diskFile, most recently used first
	bytes              int64                    // sum of the indexed sizes
	stats              DiskStats
}

// diskFile is one indexed block file.
type diskFile struct {
	name  string
	size  int64
	used  time.Time // last write or hit: the file's mtime
	floor int64     // the expiry its metadata records, unix ns
}

// diskJob is a queued Put.
type diskJob struct {
	scope   Scope
	chain   uint64
	meta    BlockMeta
	payload []byte
}

// OpenDisk opens (creating it if needed) the SSD tier in opt.Dir: it loads
// or creates the key file, removes temporary files older than an hour and
// expired or malformed block files, indexes the rest for the budget (this
// reads each file's first few hundred bytes), and starts the writer. An
// error means the tier is unusable: ErrDiskKey for the key file, otherwise
// the directory.
func OpenDisk(opt DiskOptions) (*Disk, error) {
	if opt.Dir == "" {
		return nil, errors.New("cache: disk tier needs a directory")
	}
	fsys := opt.FS
	if fsys == nil {
		fsys = OSFS{}
	}
	clk := opt.Clock
	if clk == nil {
		clk = clock.New()
	}
	keyFile := cmp.Or(opt.KeyFile, filepath.Join(filepath.Dir(filepath.Clean(opt.Dir)), "kek"))
	if err := fsys.MkdirAll(opt.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache: disk tier: %w", err)
	}
	kek, err := loadKEK(fsys, keyFile)
	if err != nil {
		return nil, err
	}
	keys, err := newDiskKeys(kek)
	if err != nil {
		return nil, err
	}
	d := &Disk{
		dir:      opt.Dir,
		fs:       fsys,
		clock:    clk,
		keys:     keys,
		ttl:      cmp.Or(opt.TTL, DefaultDiskTTL),
		cooldown: cmp.Or(opt.Cooldown, DefaultDiskCooldown),
		minFree:  cmp.Or(opt.MinFree, DefaultDiskMinFree),
		queue:    make(chan diskJob, cmp.Or(opt.Queue, DefaultDiskQueue)),
		stopped:  make(chan struct{}),
		files:    map[string]*list.Element{},
		lru:      list.New(),
	}
	d.finishedCond = sync.NewCond(&d.mu)
	if err := d.scan(clk.Now()); err != nil {
		return nil, fmt.Errorf("cache: disk tier: %w", err)
	}
	d.budget = opt.Budget
	if d.budget <= 0 {
		d.budget = DefaultDiskBudget
		if free, err := fsys.Free(opt.Dir); err == nil {
			d.budget = min(d.budget, (free+d.bytes)/2)
		}
	}
	d.mu.Lock()
	d.makeRoomLocked(0)
	d.mu.Unlock()
	go d.run()
	return d, nil
}

// loadKEK reads the key file, creating it first if it does not exist.
func loadKEK(fsys FS, path string) ([]byte, error) {
	kek, err := readKEK(fsys, path)
	if errors.Is(err, fs.ErrNotExist) {
		if err = createKEK(fsys, path); err == nil || errors.Is(err, fs.ErrExist) {
			kek, err = readKEK(fsys, path)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrDiskKey, path, err)
	}
	return kek, nil
}

func readKEK(fsys FS, path string) ([]byte, error) {
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if runtime.GOOS != "windows" && info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("mode %v: open to other users", info.Mode().Perm())
	}
	kek := make([]byte, kekLen+1)
	n, err := io.ReadFull(f, kek)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if n != kekLen {
		return nil, fmt.Errorf("%d bytes, want %d", n, kekLen)
	}
	return kek[:kekLen], nil
}

// createKEK writes a new key to a temporary file and links it into place,
// so that a key file is never seen half written and, when two processes
// race, both end up reading the winner's.
func createKEK(fsys FS, path string) error {
	dir := filepath.Dir(path)
	if err := fsys.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(dir, tempPrefix+rand.Text())
	f, err := fsys.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer fsys.Remove(tmp)
	kek := make([]byte, kekLen)
	rand.Read(kek)
	err = writeFull(f, kek)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err = fsys.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		// No hard links here: a rename may replace a key another process
		// just created, which costs only that process's files (misses).
		err = fsys.Rename(tmp, path)
	}
	return err
}

// scan indexes the block files under dir and removes what must go.
func (d *Disk) scan(now time.Time) error {
	subs, err := d.fs.ReadDir(d.dir)
	if err != nil {
		return err
	}
	var found []*diskFile
	for _, sub := range subs {
		if !sub.IsDir() || !isLowerHex(sub.Name(), 2) {
			continue
		}
		dir := filepath.Join(d.dir, sub.Name())
		ents, err := d.fs.ReadDir(dir)
		if err != nil {
			continue // its files stay unindexed; Get still reads them
		}
		for _, e := range ents {
			name, path := e.Name(), filepath.Join(dir, e.Name())
			info, err := e.Info()
			if err != nil || !info.Mode().IsRegular() {
				continue
			}
			switch {
			case strings.HasPrefix(name, tempPrefix):
				if now.Sub(info.ModTime()) >= tempMaxAge && d.fs.Remove(path) == nil {
					d.stats.Swept++
				}
			case isLowerHex(name, 64) && name[:2] == sub.Name():
				floor, err := d.readFloor(path)
				if err != nil {
					if d.fs.Remove(path) == nil {
						d.stats.Swept++
					}
					continue
				}
				f := &diskFile{name: name, size: info.Size(), used: info.ModTime(), floor: floor}
				if d.expired(f, now) {
					if d.fs.Remove(path) == nil {
						d.stats.Expired++
					}
					continue
				}
				found = append(found, f)
			}
		}
	}
	slices.SortFunc(found, func(a, b *diskFile) int { return a.used.Compare(b.used) })
	for _, f := range found {
		d.indexLocked(f) // not yet shared: no lock needed
	}
	return nil
}

// readFloor is the expiry a block file's metadata records.
func (d *Disk) readFloor(path string) (int64, error) {
	f, err := d.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b := make([]byte, headerLen+maxMetaLen)
	n, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return 0, err
	}
	_, meta, err := parseHeader(b[:n])
	if err != nil {
		return 0, err
	}
	w, err := decodeMeta(meta)
	return w.Expiry, err
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Put queues the block for writing and reports whether it was queued;
// false means dropped: the queue is full, writes are cooling down, the
// payload exceeds the budget, or the Disk is closed. It never blocks on
// I/O. Put takes ownership of payload: the caller must not modify it
// afterwards (it is encrypted later, by the writer). meta.Expiry is
// ignored. A block already on disk is not rewritten; its lifetime is
// extended.
func (d *Disk) Put(scope Scope, chain uint64, meta BlockMeta, payload []byte) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		d.stats.DropClosed++
		return false
	case d.clock.Now().Before(d.coolUntil):
		d.stats.DropCooldown++
		return false
	case len(payload) > maxPayload || fileLenBound(len(payload)) > d.budget:
		d.stats.DropTooBig++
		return false
	}
	select {
	case d.queue <- diskJob{scope: scope, chain: chain, meta: meta, payload: payload}:
		d.enqueued++
		return true
	default:
		d.stats.DropFull++
		return false
	}
}

// fileLenBound is the most bytes a block file of an n-byte payload takes.
func fileLenBound(n int) int64 {
	return int64(headerLen + maxMetaLen + trailerLen + n + gcmTagLen)
}

// Get returns the payload stored for (scope, chain) if its file is
// authentic, bound to want (every field but Expiry) and not expired, and
// extends its lifetime. Any failure is a miss, counted by reason; a file
// read and refused is deleted. The payload is the caller's.
func (d *Disk) Get(scope Scope, chain uint64, want BlockMeta) ([]byte, bool) {
	name := d.keys.fileName(scope, chain)
	path := d.path(name)
	b, info, err := d.read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		d.mu.Lock()
		d.stats.MissAbsent++
		d.mu.Unlock()
		return nil, false
	case errors.Is(err, errDiskParse):
		return d.reject(path, info, &d.stats.MissParse)
	case err != nil:
		return d.reject(path, info, &d.stats.MissIO)
	}
	w, payload, err := d.keys.decodeBlock(scope, chain, b)
	switch {
	case errors.Is(err, errDiskParse):
		return d.reject(path, info, &d.stats.MissParse)
	case err != nil:
		return d.reject(path, info, &d.stats.MissAuth)
	case !d.binds(w, want):
		return d.reject(path, info, &d.stats.MissBinding)
	}
	now := d.clock.Now()
	f := &diskFile{name: name, size: info.Size(), used: info.ModTime(), floor: w.Expiry}
	if d.expired(f, now) {
		return d.reject(path, info, &d.stats.MissExpired)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stats.Hits++
	// A file evicted or rewritten meanwhile stays a hit, but the index
	// keeps what it knows of the path now.
	if cur, err := d.fs.Stat(path); err == nil && os.SameFile(cur, info) && d.fs.Chtimes(path, now, now) == nil {
		f.used = now
		d.indexLocked(f)
	}
	return payload, true
}

// read reads a whole block file, refusing one larger than any block file.
func (d *Disk) read(path string) ([]byte, fs.FileInfo, error) {
	f, err := d.fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !info.Mode().IsRegular() || info.Size() > maxFileLen {
		return nil, info, fmt.Errorf("%w: %d-byte %v", errDiskParse, info.Size(), info.Mode().Type())
	}
	b := make([]byte, info.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: shrank while read", errDiskParse)
		}
		return nil, info, err
	}
	return b, info, nil
}

// reject counts a miss and deletes the file read, unless it has been
// replaced since (a fresh write must not be lost for an old file's fault).
func (d *Disk) reject(path string, read fs.FileInfo, reason *uint64) ([]byte, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	*reason++
	if read == nil {
		return nil, false
	}
	if now, err := d.fs.Stat(path); err != nil || !os.SameFile(now, read) {
		return nil, false
	}
	if err := d.fs.Remove(path); err == nil || errors.Is(err, fs.ErrNotExist) {
		if el, ok := d.files[filepath.Base(path)]; ok {
			d.dropLocked(el)
		}
	}
	return nil, false
}

// binds reports whether a stored binding is the one wanted.
func (d *Disk) binds(w blockMetaWire, want BlockMeta) bool {
	return w.WeightHash == want.WeightHash &&
		w.LayoutEpoch == want.LayoutEpoch &&
		w.BlockTokens == int64(want.BlockTokens) &&
		w.Tokens == int64(want.Tokens) &&
		w.PrefixTag == d.keys.prefixTag(want.PrefixSHA)
}

// expired reports whether now is past f's lifetime: max(recorded expiry,
// last use + TTL).
func (d *Disk) expired(f *diskFile, now time.Time) bool {
	end := max(f.floor, f.used.Add(d.ttl).UnixNano())
	return now.UnixNano() >= end
}

func (d *Disk) path(name string) string { return filepath.Join(d.dir, name[:2], name) }

// Flush waits until every block queued before it is written or dropped.
func (d *Disk) Flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	target := d.enqueued
	for d.finished < target {
		d.finishedCond.Wait()
	}
}

// Close stops the writer: the write in progress completes, blocks still
// queued are dropped (Flush first to keep them), and later Puts are
// dropped. Get keeps working. Close always returns nil.
func (d *Disk) Close() error {
	d.mu.Lock()
	if !d.closed {
		d.closed = true
		close(d.queue)
	}
	d.mu.Unlock()
	<-d.stopped
	return nil
}

// Stats returns the counters and the index's size now.
func (d *Disk) Stats() DiskStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.stats
	s.Misses = s.MissAbsent + s.MissExpired + s.MissAuth + s.MissParse + s.MissBinding + s.MissIO
	s.Dropped = s.DropFull + s.DropCooldown + s.DropClosed + s.DropTooBig + s.WriteErrors
	s.Files, s.Bytes, s.Budget = d.lru.Len(), d.bytes, d.budget
	return s
}

// run is the writer goroutine.
func (d *Disk) run() {
	defer close(d.stopped)
	for j := range d.queue {
		d.write(j)
		d.mu.Lock()
		d.finished++
		d.finishedCond.Broadcast()
		d.mu.Unlock()
	}
}

// write writes one queued block, or drops it.
func (d *Disk) write(j diskJob) {
	name := d.keys.fileName(j.scope, j.chain)
	path := d.path(name)

	d.mu.Lock()
	now := d.clock.Now()
	switch {
	case d.closed:
		d.stats.DropClosed++
		d.mu.Unlock()
		return
	case now.Before(d.coolUntil):
		d.stats.DropCooldown++
		d.mu.Unlock()
		return
	}
	d.reapLocked(now)
	refreshed := d.refreshLocked(name, path, now)
	d.mu.Unlock()
	if refreshed {
		return
	}

	meta := j.meta
	meta.Expiry = now.Add(d.ttl).UnixNano()
	file, err := d.keys.encodeBlock(rand.Reader, j.scope, j.chain, d.keys.wire(meta), j.payload)
	if err != nil {
		d.mu.Lock()
		d.stats.WriteErrors++
		d.mu.Unlock()
		return
	}
	size := int64(len(file))
	if free, err := d.fs.Free(d.dir); err == nil && d.minFree >= 0 && free-size < d.minFree {
		d.mu.Lock()
		d.coolLocked(now)
		d.stats.DropCooldown++
		d.mu.Unlock()
		return
	}
	d.mu.Lock()
	fits := d.makeRoomLocked(size)
	if !fits {
		d.stats.DropTooBig++
	}
	d.mu.Unlock()
	if !fits {
		return
	}
	if err := d.writeFile(path, &diskFile{name: name, size: size, used: now, floor: meta.Expiry}, file); err != nil {
		d.mu.Lock()
		d.stats.WriteErrors++
		if errors.Is(err, syscall.ENOSPC) {
			d.coolLocked(now)
		}
		d.mu.Unlock()
	}
}

// writeFile writes file to a temporary file beside path, syncs it, renames
// it into place and indexes it as f. On failure the temporary file is
// removed.
func (d *Disk) writeFile(path string, f *diskFile, file []byte) error {
	dir := filepath.Dir(path)
	if err := d.fs.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(dir, tempPrefix+rand.Text())
	t, err := d.fs.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = writeFull(t, file)
	if err == nil {
		err = t.Sync()
	}
	if cerr := t.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.fs.Chtimes(tmp, f.used, f.used)
	}
	if err == nil {
		d.mu.Lock()
		if err = d.fs.Rename(tmp, path); err == nil {
			d.indexLocked(f)
			d.stats.Writes++
		}
		d.mu.Unlock()
	}
	if err != nil {
		d.fs.Remove(tmp)
		return err
	}
	// Best effort: the rename is done either way, and a directory entry
	// lost to a crash is only a miss.
	if df, err := d.fs.OpenFile(dir, os.O_RDONLY, 0); err == nil {
		df.Sync()
		df.Close()
	}
	return nil
}

// writeFull writes all of b, turning a short write into an error.
func writeFull(f File, b []byte) error {
	n, err := f.Write(b)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	return err
}

// coolLocked stops writes until now + cooldown.
func (d *Disk) coolLocked(now time.Time) {
	d.coolUntil = now.Add(d.cooldown)
	d.stats.Cooldowns++
}

// refreshLocked extends the lifetime of name if it is indexed and alive,
// reporting whether it did (then the block need not be written).
func (d *Disk) refreshLocked(name, path string, now time.Time) bool {
	el, ok := d.files[name]
	if !ok {
		return false
	}
	f := el.Value.(*diskFile)
	if d.expired(f, now) || d.fs.Chtimes(path, now, now) != nil {
		d.removeLocked(el)
		return false
	}
	f.used = now
	d.lru.MoveToFront(el)
	d.stats.Refreshed++
	return true
}

// reapLocked removes expired files, least recently used first, stopping
// at the first whose last use is within the TTL.
func (d *Disk) reapLocked(now time.Time) {
	for el := d.lru.Back(); el != nil; {
		f := el.Value.(*diskFile)
		if now.Before(f.used.Add(d.ttl)) {
			return
		}
		prev := el.Prev()
		if d.expired(f, now) {
			d.removeLocked(el)
			d.stats.Expired++
		}
		el = prev
	}
}

// makeRoomLocked removes least recently used files until need more bytes
// fit the budget, reporting whether they do.
func (d *Disk) makeRoomLocked(need int64) bool {
	for d.bytes+need > d.budget && d.lru.Len() > 0 {
		d.removeLocked(d.lru.Back())
		d.stats.Evicted++
	}
	return d.bytes+need <= d.budget
}

// indexLocked records f as the most recently used file, replacing any
// entry of the same name.
func (d *Disk) indexLocked(f *diskFile) {
	if el, ok := d.files[f.name]; ok {
		d.dropLocked(el)
	}
	d.files[f.name] = d.lru.PushFront(f)
	d.bytes += f.size
}

// removeLocked deletes an indexed file and its entry.
func (d *Disk) removeLocked(el *list.Element) {
	d.fs.Remove(d.path(el.Value.(*diskFile).name))
	d.dropLocked(el)
}

func (d *Disk) dropLocked(el *list.Element) {
	f := el.Value.(*diskFile)
	d.bytes -= f.size
	delete(d.files, f.name)
	d.lru.Remove(el)
}
