package events

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvhost/kvhost/host/kv/radix"
)

// Publisher turns the prefix cache's stores and removals (it is the
// tree's radix.Observer, and its Hash the tree's radix.Hasher) into vLLM's
// KV event batches, one per engine step, and publishes them on a ZeroMQ PUB
// socket as vLLM's ZmqEventPublisher does: three frames, the topic, the
// batch's sequence number (8 bytes, big-endian, from 0) and the msgpack
// batch. The engine goroutine calls the Observer methods and EndStep; a
// goroutine of the publisher's own encodes and sends, so a slow network
// never stalls a step: past MaxQueueSize waiting batches a batch is dropped
// and counted (Dropped), as vLLM drops them. With ReplayEndpoint it also
// keeps the last BufferSteps batches and serves them again to subscribers
// that missed some (replay.go).
type Publisher struct {
	cfg    Config
	hash   *Hasher
	sock   zmq4.Socket
	replay *replayer // nil without ReplayEndpoint

	pending []Event
	queue   chan Batch
	done    chan struct{}
	sent    atomic.Int64
	dropped atomic.Int64
	now     func() time.Time
}

var _ radix.Observer = (*Publisher)(nil)

// NewPublisher opens cfg's PUB socket (bound or connected by vLLM's rule:
// a wildcard host, ipc:// or inproc:// binds) and starts the sender.
func NewPublisher(ctx context.Context, cfg Config, hash *Hasher) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if !cfg.Enabled() {
		return nil, fmt.Errorf("events: publisher %q publishes nothing; set enable_kv_cache_events", cfg.Publisher)
	}
	sock := zmq4.NewPub(ctx)
	if err := sock.SetOption(zmq4.OptionHWM, cfg.HWM); err != nil {
		sock.Close()
		return nil, fmt.Errorf("events: hwm: %w", err)
	}
	var err error
	if binds(cfg.Endpoint) {
		err = sock.Listen(cfg.Endpoint)
	} else {
		err = sock.Dial(cfg.Endpoint)
	}
	if err != nil {
		sock.Close()
		return nil, fmt.Errorf("events: endpoint %s: %w", cfg.Endpoint, err)
	}
	p := &Publisher{cfg: cfg, hash: hash, sock: sock, queue: make(chan Batch, cfg.MaxQueueSize), done: make(chan struct{}), now: time.Now}
	if cfg.ReplayEndpoint != "" {
		if p.replay, err = newReplayer(ctx, cfg.ReplayEndpoint, cfg.BufferSteps); err != nil {
			sock.Close()
			return nil, err
		}
	}
	go p.send()
	return p, nil
}

// Hash is the tree's block digest (vLLM's sha256_cbor chain).
func (p *Publisher) Hash(parent *radix.Digest, block []int32) radix.Digest {
	return p.hash.Hash(parent, block)
}

// BlocksStored records vLLM's BlockStored for a new leaf of the tree.
func (p *Publisher) BlocksStored(parent *radix.Digest, blocks []radix.Digest, tokens []int32) {
	ev := BlockStored{BlockHashes: external(blocks), TokenIDs: slices.Clone(tokens), BlockSize: len(tokens) / max(len(blocks), 1)}
	if parent != nil {
		h := External(*parent)
		ev.ParentBlockHash = &h
	}
	p.pending = append(p.pending, ev)
}

// BlocksRemoved records vLLM's BlockRemoved for an evicted node.
func (p *Publisher) BlocksRemoved(blocks []radix.Digest) {
	p.pending = append(p.pending, BlockRemoved{BlockHashes: external(blocks)})
}

// AllCleared records vLLM's AllBlocksCleared (the cache was reset).
func (p *Publisher) AllCleared() { p.pending = append(p.pending, AllBlocksCleared{}) }

// EndStep hands the step's events, if any, to the sender as one batch.
func (p *Publisher) EndStep() {
	if len(p.pending) == 0 {
		return
	}
	b := Batch{TS: float64(p.now().UnixNano()) / 1e9, Events: p.pending}
	p.pending = nil
	select {
	case p.queue <- b:
	default:
		p.dropped.Add(1)
	}
}

// Sent and Dropped count batches published and dropped (queue full).
func (p *Publisher) Sent() int64    { return p.sent.Load() }
func (p *Publisher) Dropped() int64 { return p.dropped.Load() }

func (p *Publisher) send() {
	defer close(p.done)
	var seq [8]byte
	for n := uint64(0); ; n++ {
		b, ok := <-p.queue
		if !ok {
			return
		}
		payload, err := Encode(b, p.cfg.Encoding)
		if err != nil { // the events are the package's own: a bug
			panic(err)
		}
		binary.BigEndian.PutUint64(seq[:], n)
		if p.replay != nil {
			// Kept whether or not the send succeeds: a replay recovers it.
			p.replay.keep(n, payload)
		}
		if err := p.sock.SendMulti(zmq4.NewMsgFrom([]byte(p.cfg.Topic), slices.Clone(seq[:]), payload)); err != nil {
			p.dropped.Add(1)
			continue
		}
		p.sent.Add(1)
	}
}

// Close publishes what is queued, then closes the sockets. EndStep must
// not be called after it.
func (p *Publisher) Close() error {
	close(p.queue)
	<-p.done
	err := p.sock.Close()
	if p.replay != nil {
		if e := p.replay.close(); err == nil {
			err = e
		}
	}
	return err
}

func external(ds []radix.Digest) []uint64 {
	out := make([]uint64, len(ds))
	for i, d := range ds {
		out[i] = External(d)
	}
	return out
}
