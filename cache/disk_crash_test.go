package cache

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// diskCrashDirEnv makes the test binary the writer TestDiskKilledWriter kills:
// it names the directory to write.
const diskCrashDirEnv = "CACHE_DISK_CRASH_WRITER_DIR"

const (
	diskCrashBlocks = 24
	// diskCrashStallAt is the block whose write the writer stalls in, a third
	// written, for the parent to kill it there.
	diskCrashStallAt = 12
)

// diskCrashBlock is block i of the writer: its payload, 256 KiB and more,
// follows from i, so the parent can check every byte read back.
func diskCrashBlock(i int) diskBlock {
	return newDiskBlock(NoScope, uint64(i)*0x9E3779B97F4A7C15, 256<<10+i*8<<10)
}

func diskCrashOptions(dir string) DiskOptions {
	return DiskOptions{Dir: dir, Budget: 1 << 30, MinFree: -1, Queue: 4}
}

// diskStallFS is the real file system, except that the write of block
// diskCrashStallAt writes a third of the file, says "mid-write" and then
// waits on stdin, which never delivers: the process dies there.
type diskStallFS struct {
	OSFS
	mu      sync.Mutex
	created int
}

func (s *diskStallFS) OpenFile(name string, flag int, perm fs.FileMode) (File, error) {
	f, err := s.OSFS.OpenFile(name, flag, perm)
	if err != nil || !isDiskBlockTemp(name) || flag&os.O_CREATE == 0 {
		return f, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.created++
	if s.created-1 == diskCrashStallAt {
		return diskStallFile{f}, nil
	}
	return f, nil
}

type diskStallFile struct{ File }

func (f diskStallFile) Write(p []byte) (int, error) {
	if _, err := f.File.Write(p[:len(p)/3]); err != nil {
		return 0, err
	}
	fmt.Println("mid-write")
	io.Copy(io.Discard, os.Stdin)
	return 0, io.ErrUnexpectedEOF
}

// diskCrashWriter puts blocks, saying "flushed N" whenever the first N are
// surely on disk, until it stalls in block diskCrashStallAt and is killed.
func diskCrashWriter(t *testing.T, dir string) {
	opt := diskCrashOptions(dir)
	opt.FS = &diskStallFS{}
	d, err := OpenDisk(opt)
	if err != nil {
		t.Fatal(err)
	}
	for i := range diskCrashBlocks {
		b := diskCrashBlock(i)
		for !d.Put(b.scope, b.chain, b.meta, b.payload) {
			d.Flush()
		}
		if i%4 == 3 {
			d.Flush()
			fmt.Printf("flushed %d\n", i+1)
		}
	}
	t.Fatal("the writer was not stopped")
}

func TestDiskKilledWriter(t *testing.T) {
	if dir := os.Getenv(diskCrashDirEnv); dir != "" {
		diskCrashWriter(t, dir)
		return
	}
	dir := filepath.Join(t.TempDir(), "0123456789ab")
	cmd := exec.Command(os.Args[0], "-test.run=^TestDiskKilledWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), diskCrashDirEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, hold, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	defer stdin.Close()
	cmd.Stdin = stdin
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	flushed, stalled := 0, false
	for lines := bufio.NewScanner(out); !stalled && lines.Scan(); {
		if n, ok := strings.CutPrefix(lines.Text(), "flushed "); ok {
			flushed, _ = strconv.Atoi(n)
		}
		stalled = lines.Text() == "mid-write"
	}
	// SIGKILL in the middle of a write: no chance to clean up.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if !stalled || flushed != diskCrashStallAt {
		t.Fatalf("writer stalled %v after %d blocks flushed, want %d", stalled, flushed, diskCrashStallAt)
	}

	// The kill left a torn temporary file, a third of block diskCrashStallAt's.
	var torn []string
	for _, f := range diskFilesUnder(t, dir) {
		if isDiskTemp(f) {
			torn = append(torn, filepath.Join(dir, f))
		}
	}
	if len(torn) != 1 {
		t.Fatalf("temporary files after the kill: %q, want 1", torn)
	}
	tornBytes, err := os.ReadFile(torn[0])
	if err != nil {
		t.Fatal(err)
	}
	victim := diskCrashBlock(diskCrashStallAt)
	if len(tornBytes) == 0 || len(tornBytes) >= len(victim.payload) {
		t.Fatalf("torn file of %d bytes, want a part of %d", len(tornBytes), len(victim.payload))
	}

	d, err := OpenDisk(diskCrashOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if s := d.Stats(); s.Files != diskCrashStallAt {
		t.Fatalf("%d files indexed after the kill, want %d", s.Files, diskCrashStallAt)
	}
	for i := range diskCrashBlocks {
		b := diskCrashBlock(i)
		got, ok := d.Get(b.scope, b.chain, b.meta)
		switch {
		case ok && !bytes.Equal(got, b.payload):
			t.Fatalf("block %d read back wrong", i)
		case ok != (i < diskCrashStallAt):
			t.Fatalf("block %d: hit %v, want a hit only for the %d flushed", i, ok, diskCrashStallAt)
		}
	}
	if s := d.Stats(); s.MissAbsent != diskCrashBlocks-diskCrashStallAt || s.Misses != s.MissAbsent {
		t.Fatalf("stats %+v", s)
	}

	// Had the torn file been renamed into place (a file system that
	// reorders a rename before the data), it is still refused.
	if err := os.MkdirAll(filepath.Dir(victim.path(d)), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(torn[0], victim.path(d)); err != nil {
		t.Fatal(err)
	}
	victim.mustMiss(t, d)
	if s := d.Stats(); s.MissParse != 1 || victim.onDisk(t, d) {
		t.Fatalf("torn file in place: %+v", s)
	}
}
