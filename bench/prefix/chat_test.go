package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestReplayHarness checks the benchmark's harness, not its timings: on
// the tiny preset, without the cache every prompt token is computed (the
// sum of the workload's prompts, exactly) and none is cached; with it the
// shared system prompt and earlier turns are cached and fewer computed,
// the two adding up to the same prompts; and the command prints its table.
func TestReplayHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping in -short mode: builds a stack per replay")
	}
	path, err := presetModel("tiny")
	if err != nil {
		t.Fatal(err)
	}
	w := workload{Conversations: 2, Turns: 3, System: 64, User: 8, Reply: 4, Threads: 1, Chunk: 32, DeviceMemory: 256 << 20}
	prompts := 0
	for range w.Conversations {
		for turn := range w.Turns {
			prompts += w.System + (turn+1)*w.User + turn*w.Reply
		}
	}
	ctx := context.Background()
	off, err := w.replay(ctx, path, false)
	if err != nil {
		t.Fatal(err)
	}
	on, err := w.replay(ctx, path, true)
	if err != nil {
		t.Fatal(err)
	}
	if off.Computed != prompts || off.Cached != 0 || off.Requests != 6 {
		t.Fatalf("cache off: %+v, want %d prompt tokens computed", off, prompts)
	}
	if on.Computed+on.Cached != prompts || on.Cached < w.System || on.Computed >= off.Computed {
		t.Fatalf("cache on: %+v; prompts hold %d tokens", on, prompts)
	}
	var out bytes.Buffer
	if err := run(ctx, []string{"-model", path, "-rounds", "1", "-conversations", "1", "-turns", "2", "-system", "32", "-threads", "1", "-device-memory", "268435456"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| prompt tokens computed |") || !strings.Contains(out.String(), "| TTFT p95 |") {
		t.Fatalf("no table:\n%s", out.String())
	}
	if err := run(ctx, []string{"-rounds", "0"}, &out); err == nil || !strings.Contains(err.Error(), "-rounds 0") {
		t.Fatalf("-rounds 0: %v", err)
	}
}
