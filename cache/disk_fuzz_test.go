package cache

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"flag"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

var updateDisk = flag.Bool("update-disk", false, "rewrite testdata/disk_v1.blk")

// The golden block: fixed key, scope, chain key, binding and randomness,
// so its file is the same bytes on every run.
var (
	diskGoldenScope = Scope(sha256.Sum256([]byte("golden tenant")))
	diskGoldenChain = uint64(0x1122334455667788)
	diskGoldenKEK   = sha256.Sum256([]byte("golden key-encryption key"))
)

func diskGoldenBlock(t testing.TB) (*diskKeys, blockMetaWire, []byte, []byte) {
	t.Helper()
	keys, err := newDiskKeys(diskGoldenKEK[:])
	if err != nil {
		t.Fatal(err)
	}
	b := newDiskBlock(diskGoldenScope, diskGoldenChain, 3000)
	b.meta.Expiry = 1_900_000_000_000_000_000
	w := keys.wire(b.meta)
	file, err := keys.encodeBlock(mrand.NewChaCha8([32]byte{1}), diskGoldenScope, diskGoldenChain, w, b.payload)
	if err != nil {
		t.Fatal(err)
	}
	return keys, w, b.payload, file
}

// TestDiskGoldenFile pins the file format: a file written by this version
// must keep decoding, and encoding must not change by accident (regenerate
// with -update-disk only with a version bump).
func TestDiskGoldenFile(t *testing.T) {
	keys, w, payload, file := diskGoldenBlock(t)
	path := filepath.Join("testdata", "disk_v1.blk")
	if *updateDisk {
		if err := os.WriteFile(path, file, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(golden, file) {
		t.Fatalf("encoding changed: %d bytes, golden %d", len(file), len(golden))
	}
	gw, got, err := keys.decodeBlock(diskGoldenScope, diskGoldenChain, bytes.Clone(golden))
	if err != nil || gw != w || !bytes.Equal(got, payload) {
		t.Fatalf("golden file: %v, meta %+v", err, gw)
	}
}

// FuzzDiskDecode feeds the decoder arbitrary files for arbitrary chain
// keys: it must never panic, must classify every failure, and may succeed
// only on the untouched golden file for its own chain key, since success
// means the input authenticated.
func FuzzDiskDecode(f *testing.F) {
	keys, w, payload, seed := diskGoldenBlock(f)
	f.Add(seed, diskGoldenChain)
	f.Add(seed, diskGoldenChain+1)
	f.Add(seed[:len(seed)-1], diskGoldenChain)
	f.Add(seed[:headerLen+10], diskGoldenChain)
	f.Add([]byte(diskMagic), diskGoldenChain)
	flipped := bytes.Clone(seed)
	flipped[headerLen+3] ^= 1
	f.Add(flipped, diskGoldenChain)
	f.Add(diskHugeHashFile(seed), diskGoldenChain)
	f.Fuzz(func(t *testing.T, file []byte, chain uint64) {
		// The header reader used at open must cope with any prefix.
		if _, meta, err := parseHeader(file); err == nil {
			decodeMeta(meta)
		}
		gw, got, err := keys.decodeBlock(diskGoldenScope, chain, bytes.Clone(file))
		if err != nil {
			if got != nil {
				t.Fatal("payload returned with an error")
			}
			if !errors.Is(err, errDiskParse) && !errors.Is(err, errDiskAuth) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if chain != diskGoldenChain || !bytes.Equal(file, seed) || gw != w || !bytes.Equal(got, payload) {
			t.Fatalf("decoded a file that is not the golden one (chain %#x, %d bytes)", chain, len(file))
		}
	})
}

// diskHugeHashFile is seed with its weight hash claiming 4 GiB (bin32 of
// 0xffffffff): what the fuzzer once turned into a 4 GiB allocation.
func diskHugeHashFile(seed []byte) []byte {
	b := bytes.Clone(seed)
	copy(b[headerLen+1:], []byte{0xc6, 0xff, 0xff, 0xff, 0xff})
	return b
}

func TestDiskDecodeBoundsAllocation(t *testing.T) {
	keys, _, _, seed := diskGoldenBlock(t)
	file := diskHugeHashFile(seed)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := keys.decodeBlock(diskGoldenScope, diskGoldenChain, file)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, errDiskParse) {
		t.Fatalf("decode = %v, want a parse error", err)
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
		t.Fatalf("decoding a %d-byte file allocated %d bytes", len(file), n)
	}
}
