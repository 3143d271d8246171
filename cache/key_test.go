package cache

import (
	"encoding/binary"
	"slices"
	"testing"
)

func TestSaltScope(t *testing.T) {
	if SaltScope("", "") != NoScope {
		t.Fatal("no salt must give NoScope")
	}
	a, b := SaltScope("tenant", ""), SaltScope("tenant", "")
	if a != b || a == NoScope {
		t.Fatalf("a salt's scope must be stable and not NoScope: %x %x", a, b)
	}
	if SaltScope("tenant", "") == SaltScope("", "tenant") {
		t.Error("a user named like a cache key must be another scope")
	}
	if SaltScope("tenant", "someone") != SaltScope("tenant", "") {
		t.Error("prompt_cache_key takes precedence over user")
	}
	if SaltScope("a", "") == SaltScope("b", "") {
		t.Error("two salts share a scope")
	}
}

// naiveBytes is what a key built by plain concatenation would hash.
func naiveBytes(parts ...[]byte) []byte { return slices.Concat(parts...) }

func int32Bytes(ts []int32) []byte {
	out := make([]byte, 0, 4*len(ts))
	for _, t := range ts {
		out = binary.LittleEndian.AppendUint32(out, uint32(t))
	}
	return out
}

func bytesAsInt32s(b []byte) []int32 {
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// TestChainKeyFieldsAreTyped crafts pairs of inputs whose fields, plainly
// concatenated, are the same bytes, and checks their keys differ: a root
// block's scope against a child's parent key and tokens, media against
// tokens, and one namespace against another.
func TestChainKeyFieldsAreTyped(t *testing.T) {
	ns := Namespace{WeightHash: [32]byte{1, 2, 3}, LayoutEpoch: 1}
	scope := SaltScope("tenant", "")
	tokens := []int32{5, 6, 7}

	// Root (scope || tokens) against child (parent || tokens'), with
	// parent = scope[:8] and tokens' = scope[8:] || tokens.
	parent := binary.LittleEndian.Uint64(scope[:8])
	shifted := append(bytesAsInt32s(scope[8:]), tokens...)
	var pb [8]byte
	binary.LittleEndian.PutUint64(pb[:], parent)
	if string(naiveBytes(scope[:], int32Bytes(tokens))) != string(naiveBytes(pb[:], int32Bytes(shifted))) {
		t.Fatal("the crafted pair is not a naive collision")
	}
	if ChainKey(ns, 0, true, scope, nil, tokens) == ChainKey(ns, parent, false, NoScope, nil, shifted) {
		t.Error("a root block's scope collides with a child's parent key")
	}

	// Media (hash || offset) || tokens against the same bytes as tokens.
	m := Media{Hash: [32]byte{9, 9, 9, 9}, Offset: 3}
	asTokens := append(bytesAsInt32s(append(m.Hash[:], int32Bytes([]int32{m.Offset})...)), tokens...)
	if ChainKey(ns, 0, true, scope, []Media{m}, tokens) == ChainKey(ns, 0, true, scope, nil, asTokens) {
		t.Error("a media hash collides with tokens of the same bytes")
	}
	if ChainKey(ns, 0, true, scope, []Media{m}, tokens) == ChainKey(ns, 0, true, scope, []Media{{Hash: m.Hash, Offset: 4}}, tokens) {
		t.Error("a media offset is not part of the key")
	}

	other := ns
	other.LayoutEpoch++
	if ChainKey(ns, 0, true, scope, nil, tokens) == ChainKey(other, 0, true, scope, nil, tokens) {
		t.Error("the layout epoch is not part of the key")
	}
	if ChainKey(ns, 0, true, scope, nil, tokens) == ChainKey(ns, 0, true, NoScope, nil, tokens) {
		t.Error("the scope is not part of the key")
	}
}

// TestChainIsPrefixStable checks that a prefix's keys are the first keys
// of any longer prompt, and that changing one token changes its block's
// key and every later one, never an earlier one.
func TestChainIsPrefixStable(t *testing.T) {
	ns := Namespace{LayoutEpoch: 1}
	tokens := make([]int32, 4*BlockTokens+10)
	for i := range tokens {
		tokens[i] = int32(i * 7 % 1000)
	}
	full := Chain(ns, NoScope, tokens, nil, 100)
	if len(full) != 4 {
		t.Fatalf("%d keys for 4 whole blocks and a tail", len(full))
	}
	if short := Chain(ns, NoScope, tokens[:2*BlockTokens], nil, 100); !slices.Equal(short, full[:2]) {
		t.Error("a prefix's keys are not the longer prompt's first keys")
	}
	// An image's placeholders in block 1 key that block and the later
	// ones by the image's hash.
	img := []Span{{Start: BlockTokens + 10, End: BlockTokens + 40, Hash: [32]byte{1}}}
	other := []Span{{Start: BlockTokens + 10, End: BlockTokens + 40, Hash: [32]byte{2}}}
	a, b := Chain(ns, NoScope, tokens, img, 100), Chain(ns, NoScope, tokens, other, 100)
	if a[0] != full[0] || a[0] != b[0] || a[1] == b[1] || a[3] == b[3] || a[1] == full[1] {
		t.Errorf("media keys: text %x, image %x, other image %x", full, a, b)
	}
	changed := slices.Clone(tokens)
	changed[2*BlockTokens+5]++
	got := Chain(ns, NoScope, changed, nil, 100)
	for j := range full {
		if same := got[j] == full[j]; same != (j < 2) {
			t.Errorf("block %d: key unchanged %v after a change in block 2", j, same)
		}
	}
}
