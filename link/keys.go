package link

import (
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/crypto/nacl/box"
)

// Key files in the key directory, PKCS#8 in PEM.
const (
	// EncryptionKeyFile holds the X25519 key requests are sealed to.
	EncryptionKeyFile = "encryption.key"
	// SigningKeyFile holds the ECDSA P-256 key that answers attestation
	// challenges.
	SigningKeyFile = "signing.key"
)

// ErrKeyPermissions: a key file or the key directory is open to other
// users. The link refuses to use it rather than repair it.
var ErrKeyPermissions = errors.New("link: key permissions too open")

// Keys are the provider's identity on the network: an X25519 key pair
// for NaCl boxes and an ECDSA P-256 key pair for signatures. Both are
// software keys kept in files.
type Keys struct {
	boxPriv, boxPub [32]byte
	sign            *ecdsa.PrivateKey
	signPub         []byte // uncompressed point, 65 bytes
}

// LoadKeys reads the keys in dir, creating the directory (0700) and any
// missing key (0600) first. It refuses, with ErrKeyPermissions, a key
// file that group or others may read or write, a key path that is not a
// regular file, and a directory that group or others may write.
func LoadKeys(dir string) (*Keys, error) {
	if dir == "" {
		return nil, errors.New("link: no key directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("link: key directory: %w", err)
	}
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("link: key directory: %w", err)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%w: directory %s has mode %04o; others must not write it (chmod 700)", ErrKeyPermissions, dir, st.Mode().Perm())
	}
	encDER, err := loadOrCreate(filepath.Join(dir, EncryptionKeyFile), newEncryptionKey)
	if err != nil {
		return nil, err
	}
	signDER, err := loadOrCreate(filepath.Join(dir, SigningKeyFile), newSigningKey)
	if err != nil {
		return nil, err
	}
	k := &Keys{}
	enc, err := x509.ParsePKCS8PrivateKey(encDER)
	if err != nil {
		return nil, fmt.Errorf("link: %s: %w", EncryptionKeyFile, err)
	}
	x, ok := enc.(*ecdh.PrivateKey)
	if !ok || x.Curve() != ecdh.X25519() {
		return nil, fmt.Errorf("link: %s: not an X25519 key", EncryptionKeyFile)
	}
	copy(k.boxPriv[:], x.Bytes())
	copy(k.boxPub[:], x.PublicKey().Bytes())
	sig, err := x509.ParsePKCS8PrivateKey(signDER)
	if err != nil {
		return nil, fmt.Errorf("link: %s: %w", SigningKeyFile, err)
	}
	p, ok := sig.(*ecdsa.PrivateKey)
	if !ok || p.Curve != elliptic.P256() {
		return nil, fmt.Errorf("link: %s: not a P-256 key", SigningKeyFile)
	}
	pub, err := p.PublicKey.ECDH()
	if err != nil {
		return nil, fmt.Errorf("link: %s: %w", SigningKeyFile, err)
	}
	k.sign, k.signPub = p, pub.Bytes()
	return k, nil
}

// EncryptionPublicKey is the X25519 public key, standard base64: what
// register and attestation_response carry as public_key.
func (k *Keys) EncryptionPublicKey() string {
	return base64.StdEncoding.EncodeToString(k.boxPub[:])
}

// SigningPublicKey is the P-256 public key as an uncompressed point,
// standard base64: what the attestation blob carries as publicKey.
func (k *Keys) SigningPublicKey() string {
	return base64.StdEncoding.EncodeToString(k.signPub)
}

// Sign returns the base64 DER ECDSA signature over SHA-256(data).
func (k *Keys) Sign(data []byte) (string, error) {
	h := sha256.Sum256(data)
	der, err := ecdsa.SignASN1(rand.Reader, k.sign, h[:])
	if err != nil {
		return "", fmt.Errorf("link: sign: %w", err)
	}
	return base64.StdEncoding.EncodeToString(der), nil
}

// shared is the NaCl box key between this provider and peer; boxes
// either way between the two use it.
func (k *Keys) shared(peer *[32]byte) *[32]byte {
	var s [32]byte
	box.Precompute(&s, peer, &k.boxPriv)
	return &s
}

func newEncryptionKey() ([]byte, error) {
	k, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return x509.MarshalPKCS8PrivateKey(k)
}

func newSigningKey() ([]byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return x509.MarshalPKCS8PrivateKey(k)
}

// loadOrCreate returns the PKCS#8 DER in path, writing a fresh key there
// first when there is none.
func loadOrCreate(path string, fresh func() ([]byte, error)) ([]byte, error) {
	der, err := readKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return der, err
	}
	der, err = fresh()
	if err != nil {
		return nil, fmt.Errorf("link: new key %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another process made it between the read and the create.
		return readKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("link: new key: %w", err)
	}
	err = pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("link: new key %s: %w", path, err)
	}
	return der, nil
}

// readKey reads one key file after checking what it is and who may read
// it. A missing file is fs.ErrNotExist.
func readKey(path string) ([]byte, error) {
	st, err := os.Lstat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("link: key file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrKeyPermissions, path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: key file %s has mode %04o; it must be 0600 or stricter (chmod 600)", ErrKeyPermissions, path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("link: key file: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("link: key file %s: no PRIVATE KEY block", path)
	}
	return blk.Bytes, nil
}

// errSealed: an encrypted body that does not open. Its cause is not
// reported: a failed open says nothing about which part was wrong.
var errSealed = errors.New("link: sealed body does not open")

// open opens a box sealed to this provider. It returns the plaintext
// and the shared key with the sender, which seals the replies.
func (k *Keys) open(s *sealed) ([]byte, *[32]byte, error) {
	peer, err := base64.StdEncoding.DecodeString(s.EphemeralPublicKey)
	if err != nil || len(peer) != 32 {
		return nil, nil, errSealed
	}
	ct, err := base64.StdEncoding.DecodeString(s.Ciphertext)
	if err != nil || len(ct) < 24+box.Overhead {
		return nil, nil, errSealed
	}
	var nonce [24]byte
	copy(nonce[:], ct)
	shared := k.shared((*[32]byte)(peer))
	plain, ok := box.OpenAfterPrecomputation(nil, ct[24:], &nonce, shared)
	if !ok {
		return nil, nil, errSealed
	}
	return plain, shared, nil
}

// seal boxes plain under shared with a fresh random nonce, as
// base64(nonce || box).
func seal(shared *[32]byte, plain []byte) (string, error) {
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", fmt.Errorf("link: nonce: %w", err)
	}
	out := box.SealAfterPrecomputation(nonce[:], plain, &nonce, shared)
	return base64.StdEncoding.EncodeToString(out), nil
}
