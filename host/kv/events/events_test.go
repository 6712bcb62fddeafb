package events

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/kvhost/kvhost/host/kv/radix"
)

// cborRef is canonical CBOR written from RFC 8949 for the three shapes a
// block hash needs (a text string, a byte string, an array of small
// unsigned ints, null): the test's independent reference for Hasher.
func cborHead(major byte, n int) []byte {
	switch {
	case n < 24:
		return []byte{major<<5 | byte(n)}
	case n < 256:
		return []byte{major<<5 | 24, byte(n)}
	default:
		return []byte{major<<5 | 25, byte(n >> 8), byte(n)}
	}
}

func refHash(parent [32]byte, block []int32) [32]byte {
	b := append(cborHead(4, 3), cborHead(2, 32)...)
	b = append(b, parent[:]...)
	b = append(b, cborHead(4, len(block))...)
	for _, t := range block {
		b = append(b, cborHead(0, int(t))...)
	}
	return sha256.Sum256(append(b, 0xf6))
}

func TestHasherMatchesCBORReference(t *testing.T) {
	h, err := NewHasher("")
	if err != nil {
		t.Fatal(err)
	}
	none := sha256.Sum256(append(cborHead(3, len(DefaultHashSeed)), DefaultHashSeed...))
	if h.None() != none {
		t.Fatalf("NONE_HASH %x, want %x", h.None(), none)
	}
	b1, b2 := []int32{1, 23, 24, 255}, []int32{256, 4000, 7, 0}
	d1 := h.Hash(nil, b1)
	if d1 != refHash(none, b1) {
		t.Fatal("first block's digest differs from the reference")
	}
	if d2 := h.Hash(&d1, b2); d2 != refHash(d1, b2) {
		t.Fatal("chained digest differs from the reference")
	}
	if External(d1) != binary.BigEndian.Uint64(d1[24:]) {
		t.Fatal("external hash")
	}
}

func TestConfigRefusals(t *testing.T) {
	for js, want := range map[string]string{
		`{"enable_kv_cache_events":true,"buffer_steps":10}`:                                  "buffer_steps 10 sizes the replay buffer",
		`{"enable_kv_cache_events":true,"replay_endpoint":"udp://x"}`:                        `replay_endpoint "udp://x"`,
		`{"enable_kv_cache_events":true,"replay_endpoint":"tcp://*:5557"}`:                   "is also the endpoint",
		`{"enable_kv_cache_events":true,"replay_endpoint":"tcp://*:5558","buffer_steps":-1}`: "buffer_steps -1, want 1..10000000",
		`{"enable_kv_cache_events":true,"endpoint":"udp://x"}`:                               `endpoint "udp://x"`,
		`{"enable_kv_cache_events":true,"hwm":-1}`:                                           "hwm -1",
		`{"enable_kv_cache_events":true,"encoding":"json"}`:                                  `encoding "json"`,
		`{"publisher":"zmq"}`:                        "enable_kv_cache_events false",
		`{"enable_kv_cache_events":true,"colour":1}`: "colour",
	} {
		if _, err := ParseConfig(js); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", js, err, want)
		}
	}
	c, err := ParseConfig(`{"enable_kv_cache_events":true,"topic":"kv@pod@m"}`)
	if err != nil || !c.Enabled() || c.WithDefaults().Endpoint != DefaultEndpoint || c.WithDefaults().BufferSteps != 0 {
		t.Fatalf("%+v %v", c, err)
	}
	c, err = ParseConfig(`{"enable_kv_cache_events":true,"replay_endpoint":"tcp://*:5558"}`)
	if err != nil || c.WithDefaults().BufferSteps != DefaultBufferSteps {
		t.Fatalf("replay: %+v %v", c, err)
	}
}

// owner is a reference-counting stand-in for the KV pools.
type owner map[int32]int

func (o owner) Shared(_ int, pg int32) bool { return o[pg] > 1 }
func (o owner) Retain(_ int, pgs []int32) {
	for _, p := range pgs {
		o[p]++
	}
}
func (o owner) Release(_ int, pgs []int32) {
	for _, p := range pgs {
		o[p]--
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// TestPublisherToSubscriber drives a prefix tree whose observer is the
// publisher through a store, an eviction and a reset, and checks what a
// ZeroMQ subscriber receives: three frames (topic, sequence number,
// msgpack batch) per step, with vLLM's events and block hashes.
func TestPublisherToSubscriber(t *testing.T) {
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, _ := NewHasher("")
	pub, err := NewPublisher(ctx, Config{EnableKVCacheEvents: true, Endpoint: fmt.Sprintf("tcp://*:%d", port), Topic: "kv@pod@m"}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, "kv@"); err != nil {
		t.Fatal(err)
	}
	own := owner{}
	tree, err := radix.New(radix.Config{Pools: []radix.Pool{{Name: "kv", Kind: radix.Full, PageSize: 2}}, Owner: own, Hash: pub.Hash, Observer: pub})
	if err != nil {
		t.Fatal(err)
	}
	toks := []int32{1, 2, 3, 4, 5}
	table := []int32{10, 11, 12}
	for _, p := range table {
		own[p] = 1
	}
	// A PUB socket drops messages until the subscription has arrived: send
	// probe batches (resets of the empty tree) until one is received, then
	// drain the probes still in flight.
	msgs := make(chan zmq4.Msg, 64)
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	var first zmq4.Msg
probe:
	for {
		if err := tree.Reset(); err != nil {
			t.Fatal(err)
		}
		pub.EndStep()
		select {
		case first = <-msgs:
			break probe
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no batch reached the subscriber")
		}
	}
	for drained := false; !drained; {
		select {
		case first = <-msgs:
		case <-time.After(300 * time.Millisecond):
			drained = true
		}
	}
	if len(first.Frames) != 3 || string(first.Frames[0]) != "kv@pod@m" {
		t.Fatalf("frames %q", first.Frames)
	}
	seq := binary.BigEndian.Uint64(first.Frames[1])
	tree.Insert(toks, [][]int32{table}, nil) // blocks [1 2] [3 4]; token 5 is a partial block
	pub.EndStep()
	next := recv(t, msgs)
	if got := binary.BigEndian.Uint64(next.Frames[1]); got <= seq {
		t.Fatalf("sequence %d after %d", got, seq)
	}
	d1 := h.Hash(nil, toks[:2])
	d2 := h.Hash(&d1, toks[2:4])
	want := fmt.Sprint([]any{"BlockStored", []any{External(d1), External(d2)}, nil, []any{1, 2, 3, 4}, 2, nil, nil, nil})
	if got := decodeEvents(t, next.Frames[2]); len(got) != 1 || fmt.Sprint(got[0]) != want {
		t.Fatalf("stored: %v, want [%s]", got, want)
	}
	if n := tree.Evict(0, 2); n != 2 {
		t.Fatalf("evicted %d pages", n)
	}
	pub.EndStep()
	want = fmt.Sprint([]any{"BlockRemoved", []any{External(d1), External(d2)}, nil})
	if got := decodeEvents(t, recv(t, msgs).Frames[2]); len(got) != 1 || fmt.Sprint(got[0]) != want {
		t.Fatalf("removed: %v, want [%s]", got, want)
	}
	if err := tree.Reset(); err != nil {
		t.Fatal(err)
	}
	pub.EndStep()
	if got := decodeEvents(t, recv(t, msgs).Frames[2]); fmt.Sprint(got) != "[[AllBlocksCleared]]" {
		t.Fatalf("cleared: %v", got)
	}
	if pub.Dropped() != 0 {
		t.Fatalf("%d batches dropped", pub.Dropped())
	}
}

func recv(t *testing.T, msgs <-chan zmq4.Msg) zmq4.Msg {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("no batch received")
	}
	return zmq4.Msg{}
}

// decodeEvents decodes a batch [ts, events, rank] generically, integers
// normalised, and returns its events.
func decodeEvents(t *testing.T, payload []byte) []any {
	t.Helper()
	var b []any
	if err := msgpack.Unmarshal(payload, &b); err != nil {
		t.Fatal(err)
	}
	if len(b) != 3 {
		t.Fatalf("batch of %d fields", len(b))
	}
	if ts, ok := b[0].(float64); !ok || ts < 1e9 {
		t.Fatalf("ts %v", b[0])
	}
	evs, _ := b[1].([]any)
	return normalise(evs).([]any)
}

func normalise(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalise(x[i])
		}
		return out
	case int8:
		return int(x)
	case int16:
		return int(x)
	case int32:
		return int(x)
	case int64:
		return int(x)
	case uint8:
		return int(x)
	case uint16:
		return int(x)
	case uint32:
		return int(x)
	case uint64:
		if x < 1<<62 {
			return int(x)
		}
		return x
	}
	return v
}
