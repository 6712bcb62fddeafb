package events

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/fxamacker/cbor/v2"
)

// DefaultHashSeed is the seed of the first block's parent (vLLM's
// NONE_HASH) when none is set: vLLM's fixed default for its cryptographic
// hashes. vLLM reads the seed from PYTHONHASHSEED when that is set, and a
// router computing block hashes (llm-d's kv-cache manager with the
// sha256_cbor algorithm) must be given the same seed.
const DefaultHashSeed = "vllm-none-hash"

// HashAlgo is the one block hash algorithm implemented: vLLM's
// --prefix-caching-hash-algo sha256_cbor, the one that does not depend on
// Python's pickle and that llm-d reproduces.
const HashAlgo = "sha256_cbor"

// Hasher computes vLLM's sha256_cbor block hashes: a block's digest is
// SHA-256 of the canonical CBOR of the array (parent digest as a byte
// string, the block's token ids, null for no extra keys); the first
// block's parent is NONE_HASH = SHA-256 of the canonical CBOR of the seed
// string. The digests chain, so equal digests mean equal prefixes.
type Hasher struct {
	none [32]byte
	enc  cbor.EncMode
}

// NewHasher is the hasher for seed (DefaultHashSeed when empty).
func NewHasher(seed string) (*Hasher, error) {
	if seed == "" {
		seed = DefaultHashSeed
	}
	enc, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		return nil, fmt.Errorf("events: cbor: %w", err)
	}
	b, err := enc.Marshal(seed)
	if err != nil {
		return nil, fmt.Errorf("events: cbor of the hash seed: %w", err)
	}
	return &Hasher{none: sha256.Sum256(b), enc: enc}, nil
}

// None is NONE_HASH, the parent of every sequence's first block.
func (h *Hasher) None() [32]byte { return h.none }

// Hash is the digest of block after the block whose digest is parent (nil:
// the first block). It has radix.Hasher's signature.
func (h *Hasher) Hash(parent *[32]byte, block []int32) [32]byte {
	if parent == nil {
		parent = &h.none
	}
	// vLLM hashes (parent, tuple(tokens), extra_keys): a CBOR array of a
	// byte string, an array of unsigned ints, and null.
	b, err := h.enc.Marshal([]any{parent[:], block, nil})
	if err != nil {
		// Marshalling bytes, int32s and nil cannot fail; a failure is a
		// broken library.
		panic(fmt.Sprintf("events: cbor of a block: %v", err))
	}
	return sha256.Sum256(b)
}

// External is the block hash routers see (vLLM's maybe_convert_block_hash
// with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, its default): the digest's
// last 8 bytes as a big-endian unsigned integer.
func External(d [32]byte) uint64 { return binary.BigEndian.Uint64(d[24:]) }
