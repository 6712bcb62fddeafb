package events

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Encoding is how a batch's events are laid out in msgpack.
type Encoding string

const (
	// Array is vLLM's positional layout (msgspec array_like structs, vLLM
	// before its PR 42892): every event an array whose first element is
	// its type's name. Every KV-aware router decodes it (llm-d's kv-cache
	// manager, NVIDIA Dynamo, AIBrix).
	Array Encoding = "array"
	// Map is vLLM's named layout since its PR 42892: every event a map
	// whose "type" key is its type's name (llm-d's kv-cache manager
	// decodes both). The batch stays positional in both.
	Map Encoding = "map"
)

// Event is one of BlockStored, BlockRemoved and AllBlocksCleared.
type Event interface{ isEvent() }

// BlockStored is vLLM's event of the same name: blocks stored after the
// block ParentBlockHash names (nil: at the start of a sequence), with their
// tokens (BlockSize per block, in order).
type BlockStored struct {
	BlockHashes     []uint64
	ParentBlockHash *uint64
	TokenIDs        []int32
	BlockSize       int
	// LoraID and LoraName are nil: kvhost serves no adapters.
	LoraID   *int64
	Medium   *string
	LoraName *string
}

// BlockRemoved is vLLM's event of the same name: the blocks were evicted.
type BlockRemoved struct {
	BlockHashes []uint64
	Medium      *string
}

// AllBlocksCleared is vLLM's event of the same name: the cache was reset.
type AllBlocksCleared struct{}

func (BlockStored) isEvent()      {}
func (BlockRemoved) isEvent()     {}
func (AllBlocksCleared) isEvent() {}

var (
	_ Event = BlockStored{}
	_ Event = BlockRemoved{}
	_ Event = AllBlocksCleared{}
)

// Batch is vLLM's KVEventBatch: the events of one scheduler step, with the
// wall time in seconds (Python's time.time()) and the data-parallel rank
// (kvhost has one, 0).
type Batch struct {
	TS               float64
	Events           []Event
	DataParallelRank int
}

// Encode lays b out as vLLM's publisher does (msgspec's msgpack, fields in
// declaration order, integers in their shortest form, defaults that
// trail omitted): [ts, [events…], data_parallel_rank].
func Encode(b Batch, enc Encoding) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.UseCompactInts(true)
	if err := encodeBatch(e, b, enc); err != nil {
		return nil, fmt.Errorf("events: encode: %w", err)
	}
	return buf.Bytes(), nil
}

func encodeBatch(e *msgpack.Encoder, b Batch, enc Encoding) error {
	if enc != Array && enc != Map {
		return fmt.Errorf("encoding %q, want %q or %q", enc, Array, Map)
	}
	if err := e.EncodeArrayLen(3); err != nil {
		return err
	}
	if err := e.EncodeFloat64(b.TS); err != nil {
		return err
	}
	if err := e.EncodeArrayLen(len(b.Events)); err != nil {
		return err
	}
	for _, ev := range b.Events {
		if err := encodeEvent(e, ev, enc); err != nil {
			return err
		}
	}
	return e.EncodeInt(int64(b.DataParallelRank))
}

// field is one named value of an event, in vLLM's declaration order.
type field struct {
	name string
	put  func(*msgpack.Encoder) error
}

func encodeEvent(e *msgpack.Encoder, ev Event, enc Encoding) error {
	var tag string
	var fields []field
	switch v := ev.(type) {
	case BlockStored:
		tag = "BlockStored"
		fields = []field{
			{"block_hashes", uints(v.BlockHashes)},
			{"parent_block_hash", optUint(v.ParentBlockHash)},
			{"token_ids", ints(v.TokenIDs)},
			{"block_size", func(e *msgpack.Encoder) error { return e.EncodeInt(int64(v.BlockSize)) }},
			{"lora_id", optInt(v.LoraID)},
			{"medium", optString(v.Medium)},
			{"lora_name", optString(v.LoraName)},
		}
	case BlockRemoved:
		tag = "BlockRemoved"
		fields = []field{{"block_hashes", uints(v.BlockHashes)}, {"medium", optString(v.Medium)}}
	case AllBlocksCleared:
		tag = "AllBlocksCleared"
	default:
		return fmt.Errorf("unknown event %T", ev)
	}
	if enc == Array {
		if err := e.EncodeArrayLen(1 + len(fields)); err != nil {
			return err
		}
		if err := e.EncodeString(tag); err != nil {
			return err
		}
	} else {
		if err := e.EncodeMapLen(1 + len(fields)); err != nil {
			return err
		}
		if err := e.EncodeString("type"); err != nil {
			return err
		}
		if err := e.EncodeString(tag); err != nil {
			return err
		}
	}
	for _, f := range fields {
		if enc == Map {
			if err := e.EncodeString(f.name); err != nil {
				return err
			}
		}
		if err := f.put(e); err != nil {
			return err
		}
	}
	return nil
}

func uints(v []uint64) func(*msgpack.Encoder) error {
	return func(e *msgpack.Encoder) error {
		if err := e.EncodeArrayLen(len(v)); err != nil {
			return err
		}
		for _, x := range v {
			if err := e.EncodeUint(x); err != nil {
				return err
			}
		}
		return nil
	}
}

func ints(v []int32) func(*msgpack.Encoder) error {
	return func(e *msgpack.Encoder) error {
		if err := e.EncodeArrayLen(len(v)); err != nil {
			return err
		}
		for _, x := range v {
			if err := e.EncodeInt(int64(x)); err != nil {
				return err
			}
		}
		return nil
	}
}

func optUint(v *uint64) func(*msgpack.Encoder) error {
	return func(e *msgpack.Encoder) error {
		if v == nil {
			return e.EncodeNil()
		}
		return e.EncodeUint(*v)
	}
}

func optInt(v *int64) func(*msgpack.Encoder) error {
	return func(e *msgpack.Encoder) error {
		if v == nil {
			return e.EncodeNil()
		}
		return e.EncodeInt(*v)
	}
}

func optString(v *string) func(*msgpack.Encoder) error {
	return func(e *msgpack.Encoder) error {
		if v == nil {
			return e.EncodeNil()
		}
		return e.EncodeString(*v)
	}
}
