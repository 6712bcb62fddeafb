package boot

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/kv/events"
)

// TestKVEventsReachASubscriber: a stack built with KV events connects its
// PUB socket to a router's bound SUB socket (llm-d's layout), and a request
// whose prompt fills whole pages produces a BlockStored batch there.
func TestKVEventsReachASubscriber(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.Listen(fmt.Sprintf("tcp://127.0.0.1:%d", port)); err != nil {
		t.Fatal(err)
	}
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	msgs := make(chan zmq4.Msg, 16)
	go func() {
		for {
			m, err := sub.Recv()
			if err != nil {
				return
			}
			msgs <- m
		}
	}()
	cfg := baseConfig(writeModel(t, "tiny"), 256<<20)
	cfg.KVEvents = events.Config{EnableKVCacheEvents: true, Endpoint: fmt.Sprintf("tcp://127.0.0.1:%d", port), Topic: "kv@test@tiny"}
	s, err := Build(cfg, nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	if s.Events == nil {
		t.Fatal("no publisher")
	}
	// The PUB side drops batches until the subscription has reached it:
	// send requests with fresh 40-token prompts until a batch arrives.
	for i := 0; ; i++ {
		prompt := make([]int32, 40)
		for j := range prompt {
			prompt[j] = int32(100 + i*50 + j)
		}
		st, err := s.Engine.Submit(ctx, engine.Request{Prompt: prompt, MaxTokens: 2, IgnoreEOS: true})
		if err != nil {
			t.Fatal(err)
		}
		for range st.Events {
		}
		select {
		case m := <-msgs:
			if len(m.Frames) != 3 || string(m.Frames[0]) != "kv@test@tiny" || len(m.Frames[1]) != 8 || !strings.Contains(string(m.Frames[2]), "BlockStored") {
				t.Fatalf("frames %q", m.Frames)
			}
			return
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			t.Fatal("no KV event batch reached the subscriber")
		}
	}
}
