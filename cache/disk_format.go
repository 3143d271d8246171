package cache

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/vmihailenco/msgpack/v5"
)

// The block file, all integers little-endian:
//
//	offset  size  field
//	0       8     magic "KVBLOCK\x00"
//	8       2     format version (diskVersion)
//	10      2     m, the metadata's length: 1..maxMetaLen
//	12      m     metadata: canonical msgpack of blockMetaWire
//	12+m    12    nonce of the wrapped data key
//	24+m    48    the data key sealed under the wrap key (32 bytes + GCM tag)
//	72+m    12    nonce of the payload
//	84+m    8     c, the sealed payload's length: exactly the bytes that follow, >= 16
//	92+m    c     the payload sealed under the data key (ciphertext + GCM tag)
//
// Both seals take as additional data the bytes 0..12+m followed by the
// block's scope and chain key, so neither the metadata nor the file's name
// can change without the file failing to open.
const (
	diskMagic   = "KVBLOCK\x00"
	diskVersion = 1

	headerLen  = len(diskMagic) + 2 + 2 // up to the metadata
	nonceLen   = 12
	dataKeyLen = 32
	gcmTagLen  = 16
	wrappedLen = dataKeyLen + gcmTagLen
	// trailerLen is everything between the metadata and the sealed payload.
	trailerLen = nonceLen + wrappedLen + nonceLen + 8

	// maxMetaLen bounds the metadata; its canonical encoding is ~100 bytes.
	maxMetaLen = 256
	// maxPayload bounds a block's payload, and with it any file the decoder
	// reads: nothing larger is ever written or read back.
	maxPayload = 1 << 30
	// maxFileLen is the largest block file there can be.
	maxFileLen = int64(headerLen + maxMetaLen + trailerLen + maxPayload + gcmTagLen)
)

// Why a block file failed to decode. Binding and expiry are judged by the
// store after a successful decode.
var (
	errDiskParse = errors.New("block file malformed")
	errDiskAuth  = errors.New("block file failed authentication")
)

// blockMetaWire is the metadata as it is stored: BlockMeta with the prefix
// hash replaced by a keyed tag of it, so that a file shows nothing that
// lets a reader without the key confirm a guessed prompt.
type blockMetaWire struct {
	WeightHash  [32]byte
	LayoutEpoch uint32
	BlockTokens int64
	Tokens      int64
	PrefixTag   [32]byte
	Expiry      int64
}

// metaFields is the length of the metadata's msgpack array.
const metaFields = 6

// encodeMeta is the canonical encoding: a six-element array, the hashes as
// 32-byte bin, every integer in its shortest form.
func encodeMeta(w blockMetaWire) []byte {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	// Writes to a bytes.Buffer cannot fail.
	_ = e.EncodeArrayLen(metaFields)
	_ = e.EncodeBytes(w.WeightHash[:])
	_ = e.EncodeUint(uint64(w.LayoutEpoch))
	_ = e.EncodeInt(w.BlockTokens)
	_ = e.EncodeInt(w.Tokens)
	_ = e.EncodeBytes(w.PrefixTag[:])
	_ = e.EncodeInt(w.Expiry)
	return buf.Bytes()
}

// decodeMeta accepts exactly the canonical encoding: whatever decodes is
// re-encoded and must give back the same bytes.
func decodeMeta(b []byte) (blockMetaWire, error) {
	var w blockMetaWire
	d := msgpack.NewDecoder(bytes.NewReader(b))
	n, err := d.DecodeArrayLen()
	if err != nil || n != metaFields {
		return w, fmt.Errorf("%w: metadata is not a %d-field array", errDiskParse, metaFields)
	}
	// A hash is read into its array once its length is known to fit:
	// DecodeBytes would allocate whatever length the input claims.
	hash := func(dst *[32]byte) error {
		n, err := d.DecodeBytesLen()
		if err == nil && n != len(dst) {
			err = fmt.Errorf("hash of %d bytes", n)
		}
		if err == nil {
			err = d.ReadFull(dst[:])
		}
		return err
	}
	if err = hash(&w.WeightHash); err == nil {
		w.LayoutEpoch, err = d.DecodeUint32()
	}
	if err == nil {
		w.BlockTokens, err = d.DecodeInt64()
	}
	if err == nil {
		w.Tokens, err = d.DecodeInt64()
	}
	if err == nil {
		err = hash(&w.PrefixTag)
	}
	if err == nil {
		w.Expiry, err = d.DecodeInt64()
	}
	if err != nil {
		return w, fmt.Errorf("%w: metadata: %v", errDiskParse, err)
	}
	if !bytes.Equal(encodeMeta(w), b) {
		return w, fmt.Errorf("%w: metadata not canonical", errDiskParse)
	}
	return w, nil
}

// diskKeys are the keys derived from the key-encryption key (KEK), each
// for one use: HMAC-SHA256(KEK, label).
type diskKeys struct {
	name   []byte      // HMAC key of file names
	prefix []byte      // HMAC key of the stored prefix tag
	wrap   cipher.AEAD // seals each file's data key
}

func newDiskKeys(kek []byte) (*diskKeys, error) {
	derive := func(label string) []byte {
		m := hmac.New(sha256.New, kek)
		m.Write([]byte(label))
		return m.Sum(nil)
	}
	wrap, err := newGCM(derive("prefix-cache/wrap/1"))
	if err != nil {
		return nil, err
	}
	return &diskKeys{
		name:   derive("prefix-cache/name/1"),
		prefix: derive("prefix-cache/prefix/1"),
		wrap:   wrap,
	}, nil
}

func newGCM(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// fileName is the 64 hex digits of HMAC-SHA256 of the scope and chain key:
// stable for a block, meaningless without the key.
func (k *diskKeys) fileName(scope Scope, chain uint64) string {
	m := hmac.New(sha256.New, k.name)
	m.Write(scope[:])
	var c [8]byte
	binary.LittleEndian.PutUint64(c[:], chain)
	m.Write(c[:])
	return hex.EncodeToString(m.Sum(nil))
}

// prefixTag is the keyed tag of a PrefixSHA that the metadata stores.
func (k *diskKeys) prefixTag(sha [32]byte) [32]byte {
	m := hmac.New(sha256.New, k.prefix)
	m.Write(sha[:])
	var t [32]byte
	m.Sum(t[:0])
	return t
}

// wire is meta as stored: its prefix hash replaced by the keyed tag.
func (k *diskKeys) wire(meta BlockMeta) blockMetaWire {
	return blockMetaWire{
		WeightHash:  meta.WeightHash,
		LayoutEpoch: meta.LayoutEpoch,
		BlockTokens: int64(meta.BlockTokens),
		Tokens:      int64(meta.Tokens),
		PrefixTag:   k.prefixTag(meta.PrefixSHA),
		Expiry:      meta.Expiry,
	}
}

// blockAAD is the additional data of both seals: the file's header and
// metadata, then the scope and chain key its name stands for.
func blockAAD(header []byte, scope Scope, chain uint64) []byte {
	aad := make([]byte, 0, len(header)+len(scope)+8)
	aad = append(aad, header...)
	aad = append(aad, scope[:]...)
	return binary.LittleEndian.AppendUint64(aad, chain)
}

// encodeBlock is the file of one block. rnd supplies the data key and the
// two nonces (crypto/rand outside tests).
func (k *diskKeys) encodeBlock(rnd io.Reader, scope Scope, chain uint64, w blockMetaWire, payload []byte) ([]byte, error) {
	if len(payload) > maxPayload {
		return nil, fmt.Errorf("block payload of %d bytes exceeds %d", len(payload), maxPayload)
	}
	meta := encodeMeta(w)
	var secrets [dataKeyLen + 2*nonceLen]byte
	if _, err := io.ReadFull(rnd, secrets[:]); err != nil {
		return nil, err
	}
	dataKey, wrapNonce, dataNonce := secrets[:dataKeyLen], secrets[dataKeyLen:dataKeyLen+nonceLen], secrets[dataKeyLen+nonceLen:]
	data, err := newGCM(dataKey)
	if err != nil {
		return nil, err
	}

	out := make([]byte, 0, headerLen+len(meta)+trailerLen+len(payload)+gcmTagLen)
	out = append(out, diskMagic...)
	out = binary.LittleEndian.AppendUint16(out, diskVersion)
	out = binary.LittleEndian.AppendUint16(out, uint16(len(meta)))
	out = append(out, meta...)
	aad := blockAAD(out, scope, chain)
	out = append(out, wrapNonce...)
	out = k.wrap.Seal(out, wrapNonce, dataKey, aad)
	out = append(out, dataNonce...)
	out = binary.LittleEndian.AppendUint64(out, uint64(len(payload)+gcmTagLen))
	return data.Seal(out, dataNonce, payload, aad), nil
}

// blockFrame is a block file cut at its length prefixes, nothing checked
// but the framing.
type blockFrame struct {
	header    []byte // magic through metadata
	meta      []byte
	wrapNonce []byte
	wrapped   []byte
	dataNonce []byte
	sealed    []byte
}

// parseHeader checks the magic and version and cuts the metadata out of b,
// which may be only the file's first bytes.
func parseHeader(b []byte) (header, meta []byte, err error) {
	if len(b) < headerLen {
		return nil, nil, fmt.Errorf("%w: %d bytes", errDiskParse, len(b))
	}
	if string(b[:len(diskMagic)]) != diskMagic {
		return nil, nil, fmt.Errorf("%w: bad magic", errDiskParse)
	}
	if v := binary.LittleEndian.Uint16(b[len(diskMagic):]); v != diskVersion {
		return nil, nil, fmt.Errorf("%w: version %d", errDiskParse, v)
	}
	m := int(binary.LittleEndian.Uint16(b[len(diskMagic)+2:]))
	if m < 1 || m > maxMetaLen || len(b) < headerLen+m {
		return nil, nil, fmt.Errorf("%w: metadata length %d", errDiskParse, m)
	}
	return b[:headerLen+m], b[headerLen : headerLen+m], nil
}

// parseFrame cuts a whole file into its fields. Every length is checked
// against the bytes present before it is used, so no input makes it panic
// or allocate.
func parseFrame(b []byte) (blockFrame, error) {
	header, meta, err := parseHeader(b)
	if err != nil {
		return blockFrame{}, err
	}
	rest := b[len(header):]
	if len(rest) < trailerLen {
		return blockFrame{}, fmt.Errorf("%w: truncated before payload", errDiskParse)
	}
	f := blockFrame{header: header, meta: meta}
	f.wrapNonce, rest = rest[:nonceLen], rest[nonceLen:]
	f.wrapped, rest = rest[:wrappedLen], rest[wrappedLen:]
	f.dataNonce, rest = rest[:nonceLen], rest[nonceLen:]
	c := binary.LittleEndian.Uint64(rest)
	rest = rest[8:]
	if c < gcmTagLen || c != uint64(len(rest)) {
		return blockFrame{}, fmt.Errorf("%w: payload length %d, %d bytes follow", errDiskParse, c, len(rest))
	}
	f.sealed = rest
	return f, nil
}

// decodeBlock parses b and opens it as the file of (scope, chain). On
// success the metadata and payload are authentic: this key wrote exactly
// these bytes for this block. The payload is decrypted in place, so b is
// overwritten either way.
func (k *diskKeys) decodeBlock(scope Scope, chain uint64, b []byte) (blockMetaWire, []byte, error) {
	f, err := parseFrame(b)
	if err != nil {
		return blockMetaWire{}, nil, err
	}
	w, err := decodeMeta(f.meta)
	if err != nil {
		return blockMetaWire{}, nil, err
	}
	aad := blockAAD(f.header, scope, chain)
	dataKey, err := k.wrap.Open(nil, f.wrapNonce, f.wrapped, aad)
	if err != nil {
		return blockMetaWire{}, nil, fmt.Errorf("%w: data key", errDiskAuth)
	}
	data, err := newGCM(dataKey)
	if err != nil {
		return blockMetaWire{}, nil, err
	}
	payload, err := data.Open(f.sealed[:0], f.dataNonce, f.sealed, aad)
	if err != nil {
		return blockMetaWire{}, nil, fmt.Errorf("%w: payload", errDiskAuth)
	}
	return w, payload, nil
}
