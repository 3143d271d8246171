package link

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"
)

// blob is the self-signed attestation register carries. It states only
// what holds on this machine: no Secure Enclave, SIP, Secure Boot or
// hypervisor isolation is claimed. Fields are in the key order of the
// coordinator's reference encoding (alphabetical); the coordinator
// verifies the bytes as sent.
type blob struct {
	AuthenticatedRootEnabled bool   `json:"authenticatedRootEnabled"`
	ChipName                 string `json:"chipName"`
	EncryptionPublicKey      string `json:"encryptionPublicKey"`
	HardwareModel            string `json:"hardwareModel"`
	HypervisorActive         bool   `json:"hypervisorActive"`
	OSVersion                string `json:"osVersion"`
	PublicKey                string `json:"publicKey"`
	RDMADisabled             bool   `json:"rdmaDisabled"`
	SecureBootEnabled        bool   `json:"secureBootEnabled"`
	SecureEnclaveAvailable   bool   `json:"secureEnclaveAvailable"`
	SIPEnabled               bool   `json:"sipEnabled"`
	Timestamp                string `json:"timestamp"`
}

type signedBlob struct {
	Attestation json.RawMessage `json:"attestation"`
	Signature   string          `json:"signature"`
}

// attestation returns the signed blob: the blob's JSON bytes and a DER
// ECDSA signature over their SHA-256, made with the signing key. The
// coordinator takes the signing public key from it to check challenge
// answers.
func attestation(k *Keys, h host, now time.Time) (json.RawMessage, error) {
	b := blob{
		ChipName:            h.hw.ChipName,
		EncryptionPublicKey: k.EncryptionPublicKey(),
		HardwareModel:       h.hw.MachineModel,
		OSVersion:           h.osVersion,
		PublicKey:           k.SigningPublicKey(),
		RDMADisabled:        h.rdmaFree != nil && *h.rdmaFree,
		Timestamp:           now.UTC().Format(time.RFC3339),
	}
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("link: attestation: %w", err)
	}
	sig, err := k.Sign(raw)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(signedBlob{Attestation: raw, Signature: sig})
	if err != nil {
		return nil, fmt.Errorf("link: attestation: %w", err)
	}
	return out, nil
}

// answer is the reply to an attestation challenge: the signature over
// the nonce and timestamp strings as received, concatenated, and the
// posture at this instant, as far as it is known here.
func answer(k *Keys, h host, c challengeMsg, binaryHash string, models []ModelInfo) (attestationMsg, error) {
	sig, err := k.Sign([]byte(c.Nonce + c.Timestamp))
	if err != nil {
		return attestationMsg{}, err
	}
	no := false
	m := attestationMsg{
		Type:             typeAttestation,
		Nonce:            c.Nonce,
		Signature:        sig,
		PublicKey:        k.EncryptionPublicKey(),
		HypervisorActive: &no,
		SIPEnabled:       &no,
		RDMADisabled:     h.rdmaFree,
		BinaryHash:       binaryHash,
	}
	for _, mi := range models {
		if mi.WeightHash != "" {
			if m.ModelHashes == nil {
				m.ModelHashes = map[string]string{}
			}
			m.ModelHashes[mi.ID] = mi.WeightHash
		}
	}
	return m, nil
}

// executableHash is the SHA-256 of the running binary's file, hex; ""
// when it cannot be read.
func executableHash() string {
	p, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
