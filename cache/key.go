package cache

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// BlockTokens is the tokens of one cached block (the KV pool's block).
const BlockTokens = 256

// Namespace is what makes keys of one model and KV layout differ from
// another's: the weights' fingerprint and a layout epoch bumped whenever
// what a block stores changes meaning.
type Namespace struct {
	WeightHash  [32]byte
	LayoutEpoch uint32
}

// Scope is a tenant's cache scope: SHA-256 of its salt, or all zero for
// requests without one. Different scopes never share a block.
type Scope [32]byte

// NoScope is the scope of unsalted requests.
var NoScope Scope

// SaltScope derives the scope of a request: prompt_cache_key when present,
// else user, hashed with SHA-256; neither field gives NoScope. The salt is
// derived server-side from what the request says, never taken as a key.
func SaltScope(promptCacheKey, user string) Scope {
	salt, field := promptCacheKey, byte(1)
	if salt == "" {
		salt, field = user, 2
	}
	if salt == "" {
		return NoScope
	}
	h := sha256.New()
	// The field it came from is part of the scope: a user named like a
	// cache key is another tenant.
	h.Write([]byte{field})
	h.Write([]byte(salt))
	var s Scope
	h.Sum(s[:0])
	return s
}

// Media is an image or video frame whose placeholder tokens a block holds:
// the hash of its decoded content and the block offset of its first
// placeholder (negative when it began in an earlier block).
type Media struct {
	Hash   [32]byte
	Offset int32
}

// Field tags of a key's encoding. Every field is tag, length, bytes, so no
// two different field lists encode alike.
const (
	fieldDomain = iota + 1
	fieldNamespace
	fieldRoot
	fieldParent
	fieldScope
	fieldMedia
	fieldTokens
)

// keyDomain separates these keys from any other use of the hash.
const keyDomain = "prefix-block/1"

// ChainKey is the key of one full block: the parent block's key (root for
// the first block, which also carries the scope), the namespace, the media
// the block holds and its tokens, each a typed, length-prefixed field.
// xxhash is not collision-proof: a hit must still compare the stored
// tokens, parent and scope with the request's.
func ChainKey(ns Namespace, parent uint64, root bool, scope Scope, media []Media, tokens []int32) uint64 {
	e := keyEncoder{xxhash.New()}
	e.field(fieldDomain, []byte(keyDomain))
	var nsb [36]byte
	copy(nsb[:], ns.WeightHash[:])
	binary.LittleEndian.PutUint32(nsb[32:], ns.LayoutEpoch)
	e.field(fieldNamespace, nsb[:])
	if root {
		e.field(fieldRoot, nil)
		e.field(fieldScope, scope[:])
	} else {
		var pb [8]byte
		binary.LittleEndian.PutUint64(pb[:], parent)
		e.field(fieldParent, pb[:])
	}
	mb := make([]byte, 0, len(media)*36)
	for _, m := range media {
		mb = append(mb, m.Hash[:]...)
		mb = binary.LittleEndian.AppendUint32(mb, uint32(m.Offset))
	}
	e.field(fieldMedia, mb)
	tb := make([]byte, 0, 4*len(tokens))
	for _, t := range tokens {
		tb = binary.LittleEndian.AppendUint32(tb, uint32(t))
	}
	e.field(fieldTokens, tb)
	return e.d.Sum64()
}

type keyEncoder struct{ d *xxhash.Digest }

func (e keyEncoder) field(tag byte, b []byte) {
	var h [9]byte
	h[0] = tag
	binary.LittleEndian.PutUint64(h[1:], uint64(len(b)))
	e.d.Write(h[:])
	e.d.Write(b)
}

// Span is the placeholder run [Start, End) of one image or video frame in
// a prompt, and the hash of its decoded content.
type Span struct {
	Start, End int
	Hash       [32]byte
}

// blockMedia is the media of spans that block j holds any placeholder of,
// with their offsets from the block's start.
func blockMedia(spans []Span, j int) []Media {
	var out []Media
	lo, hi := j*BlockTokens, (j+1)*BlockTokens
	for _, sp := range spans {
		if sp.Start < hi && sp.End > lo {
			out = append(out, Media{Hash: sp.Hash, Offset: int32(sp.Start - lo)})
		}
	}
	return out
}

// Chain is the keys of the first n full blocks of tokens under scope, whose
// media placeholders are spans, block j's key chaining block j-1's.
func Chain(ns Namespace, scope Scope, tokens []int32, spans []Span, n int) []uint64 {
	n = min(n, len(tokens)/BlockTokens)
	keys := make([]uint64, n)
	for j := range n {
		var parent uint64
		if j > 0 {
			parent = keys[j-1]
		}
		keys[j] = ChainKey(ns, parent, j == 0, scope, blockMedia(spans, j), tokens[j*BlockTokens:(j+1)*BlockTokens])
	}
	return keys
}

// PrefixSHA is SHA-256 of a prefix's scope and token ids: what the disk
// tier binds a block file to, so that a file is only ever read back for the
// exact prefix it was written from.
func PrefixSHA(scope Scope, tokens []int32) [32]byte {
	h := sha256.New()
	h.Write(scope[:])
	var b [4]byte
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}
