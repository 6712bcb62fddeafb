package events

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-zeromq/zmq4"
)

// endSeq ends a replay: vLLM's END_SEQ, -1 as 8 big-endian bytes.
var endSeq = []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// replayer serves vLLM's replay socket: a ZeroMQ ROUTER bound at
// replay_endpoint, where a subscriber that saw a gap in the sequence
// numbers asks for the batches from a sequence number on. The request is
// the 8-byte big-endian start (from a REQ socket, or a DEALER sending an
// empty delimiter frame first, or none); the answer, to that peer only, is
// one message per buffered batch with a sequence number at or past the
// start, [seq (8 bytes), msgpack batch], oldest first, then [END_SEQ, ""]
// (the delimiter echoed when the request had one). The buffer keeps the
// last buffer_steps batches the publisher sent (or failed to send), so a
// start older than the oldest kept batch gets what is left: the subscriber
// sees the first sequence number it gets back and knows what it lost.
type replayer struct {
	sock zmq4.Socket
	size int

	mu    sync.Mutex
	ring  []kept // the last size batches, oldest at head
	head  int
	done  chan struct{}
	bad   atomic.Int64
	sends atomic.Int64
}

type kept struct {
	seq     uint64
	payload []byte
}

// newReplayer binds the ROUTER socket at ep and starts answering.
func newReplayer(ctx context.Context, ep string, size int) (*replayer, error) {
	sock := zmq4.NewRouter(ctx)
	if err := sock.Listen(ep); err != nil {
		sock.Close()
		return nil, fmt.Errorf("events: replay_endpoint %s: %w", ep, err)
	}
	r := &replayer{sock: sock, size: size, done: make(chan struct{})}
	go r.serve()
	return r, nil
}

// keep records a batch the publisher sent as seq (the sender goroutine).
func (r *replayer) keep(seq uint64, payload []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ring) < r.size {
		r.ring = append(r.ring, kept{seq, payload})
		return
	}
	r.ring[r.head] = kept{seq, payload}
	r.head = (r.head + 1) % r.size
}

// from is the kept batches with a sequence number at or past start,
// oldest first.
func (r *replayer) from(start uint64) []kept {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []kept
	for i := range r.ring {
		if k := r.ring[(r.head+i)%len(r.ring)]; k.seq >= start {
			out = append(out, k)
		}
	}
	return out
}

func (r *replayer) serve() {
	defer close(r.done)
	for {
		m, err := r.sock.Recv()
		if err != nil {
			return // closed
		}
		// [peer, start] or [peer, "", start]
		f := m.Frames
		if len(f) < 2 || len(f) > 3 || len(f) == 3 && len(f[1]) != 0 || len(f[len(f)-1]) != 8 {
			r.bad.Add(1) // as vLLM: a malformed request is not answered
			continue
		}
		route := f[:len(f)-1]
		start := binary.BigEndian.Uint64(f[len(f)-1])
		for _, k := range r.from(start) {
			var seq [8]byte
			binary.BigEndian.PutUint64(seq[:], k.seq)
			if r.send(route, seq[:], k.payload) != nil {
				break
			}
		}
		_ = r.send(route, endSeq, nil)
	}
}

func (r *replayer) send(route [][]byte, seq, payload []byte) error {
	frames := append(append(make([][]byte, 0, len(route)+2), route...), seq, payload)
	err := r.sock.SendMulti(zmq4.NewMsgFrom(frames...))
	if err == nil {
		r.sends.Add(1)
	}
	return err
}

// close stops answering.
func (r *replayer) close() error {
	err := r.sock.Close()
	<-r.done
	return err
}
