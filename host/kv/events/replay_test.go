package events

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
)

// TestReplayServesMissedBatches: a subscriber that connects late misses
// the first batches; it sees the gap in the sequence numbers and asks the
// replay socket (a DEALER, with and without the empty delimiter REQ
// sends) for them: it gets every batch from the start it asked for, byte
// for byte as published, then END_SEQ. The buffer keeps the last
// buffer_steps batches only, and a start past the newest gets END_SEQ
// alone.
func TestReplayServesMissedBatches(t *testing.T) {
	port, rport := freePort(t), freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, _ := NewHasher("")
	const keep = 6
	pub, err := NewPublisher(ctx, Config{EnableKVCacheEvents: true, Endpoint: fmt.Sprintf("tcp://*:%d", port),
		ReplayEndpoint: fmt.Sprintf("tcp://*:%d", rport), BufferSteps: keep, Topic: "kv"}, h)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	// Batches 0..3 go out before anyone subscribes: lost on the PUB side.
	step := func(i int) {
		pub.BlocksRemoved(nil)
		pub.pending[len(pub.pending)-1] = BlockRemoved{BlockHashes: []uint64{uint64(1000 + i)}}
		pub.EndStep()
	}
	for i := range 4 {
		step(i)
	}
	for pub.Sent() < 4 {
		time.Sleep(time.Millisecond)
	}
	// zmq4's PUB queues a send and its own goroutine hands it to the
	// peers connected then (none): give it time to drain.
	time.Sleep(300 * time.Millisecond)

	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
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
	// Publish until the subscription is through; the first batch it gets
	// shows the gap.
	var first zmq4.Msg
	steps := 4
	for ; ; steps++ {
		step(steps)
		select {
		case first = <-msgs:
		case <-time.After(100 * time.Millisecond):
			continue
		case <-ctx.Done():
			t.Fatal("no batch reached the subscriber")
		}
		break
	}
	got := binary.BigEndian.Uint64(first.Frames[1])
	if got == 0 {
		t.Fatalf("the late subscriber missed nothing: first batch %q, %d sent before it subscribed", first.Frames, 4)
	}
	// More batches than the buffer keeps.
	for steps++; steps < keep+4; steps++ {
		step(steps)
	}
	published := int64(steps)
	for pub.Sent() < published {
		time.Sleep(time.Millisecond)
	}

	for _, delim := range []bool{true, false} {
		// Ask from 0: only the last `keep` batches are left.
		replies := replay(t, ctx, rport, 0, delim)
		oldest := uint64(published) - keep
		if len(replies) != keep {
			t.Fatalf("delimiter %v: %d batches replayed, want the %d kept", delim, len(replies), keep)
		}
		for j, r := range replies {
			if r.seq != oldest+uint64(j) {
				t.Fatalf("replayed sequence %d at %d, want %d", r.seq, j, oldest+uint64(j))
			}
			want := fmt.Sprint([]any{"BlockRemoved", []any{1000 + int(r.seq)}, nil})
			if evs := decodeEvents(t, r.payload); len(evs) != 1 || fmt.Sprint(evs[0]) != want {
				t.Fatalf("batch %d replayed as %v, want [%s]", r.seq, evs, want)
			}
		}
		// Ask from the batch the subscriber got: byte for byte the same.
		replies = replay(t, ctx, rport, got, delim)
		if len(replies) == 0 || replies[0].seq != got || !bytes.Equal(replies[0].payload, first.Frames[2]) {
			t.Fatalf("replay from %d: %+v, the subscriber got %x", got, replies, first.Frames[2])
		}
		if replies := replay(t, ctx, rport, uint64(published)+5, delim); len(replies) != 0 {
			t.Fatalf("replay past the newest batch: %+v", replies)
		}
	}
}

type replayed struct {
	seq     uint64
	payload []byte
}

// replay asks the replay socket for the batches from start and reads until
// END_SEQ.
func replay(t *testing.T, ctx context.Context, port int, start uint64, delim bool) []replayed {
	t.Helper()
	d := zmq4.NewDealer(ctx)
	defer d.Close()
	if err := d.Dial(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], start)
	req := [][]byte{s[:]}
	if delim {
		req = [][]byte{{}, s[:]}
	}
	if err := d.SendMulti(zmq4.NewMsgFrom(req...)); err != nil {
		t.Fatal(err)
	}
	var out []replayed
	for {
		m, err := d.Recv()
		if err != nil {
			t.Fatal(err)
		}
		f := m.Frames
		if delim {
			if len(f) != 3 || len(f[0]) != 0 {
				t.Fatalf("reply frames %q", f)
			}
			f = f[1:]
		}
		if len(f) != 2 || len(f[0]) != 8 {
			t.Fatalf("reply frames %q", m.Frames)
		}
		if bytes.Equal(f[0], endSeq) {
			if len(f[1]) != 0 {
				t.Fatalf("END_SEQ with a payload %x", f[1])
			}
			return out
		}
		out = append(out, replayed{binary.BigEndian.Uint64(f[0]), f[1]})
	}
}
