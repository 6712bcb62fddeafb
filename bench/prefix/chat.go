package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kvhost/kvhost/host/boot"
	_ "github.com/kvhost/kvhost/host/device/cpu" // the embedded default device
	"github.com/kvhost/kvhost/host/engine"
	"github.com/kvhost/kvhost/host/model/synth"
)

// workload is the chat replay: Conversations run concurrently, each Turns
// requests one after the other; turn t's prompt is the System tokens, the
// earlier turns (User tokens each, then the Reply tokens the model
// generated) and the new user turn.
type workload struct {
	Conversations, Turns, System, User, Reply int
	Threads, Chunk                            int
	DeviceMemory                              int64
}

func (w workload) validate() error {
	switch {
	case w.Conversations < 1 || w.Conversations > 256:
		return fmt.Errorf("-conversations %d, want 1..256", w.Conversations)
	case w.Turns < 1 || w.Turns > 64:
		return fmt.Errorf("-turns %d, want 1..64", w.Turns)
	case w.System < 0 || w.User < 1 || w.Reply < 1:
		return fmt.Errorf("-system %d, -user %d, -reply %d: want system >= 0, user and reply >= 1", w.System, w.User, w.Reply)
	case w.Threads < 1 || w.Chunk < 1:
		return fmt.Errorf("-threads %d, -chunk %d: want both >= 1", w.Threads, w.Chunk)
	}
	return nil
}

// result is one replay's figures.
type result struct {
	// Computed is the prompt tokens the forwards computed (each request's
	// prompt minus its cached tokens, as usage reports them); Cached the
	// prompt tokens served from the cache.
	Computed, Cached int
	TTFTp50, TTFTp95 time.Duration
	Total            time.Duration
	Preemptions      int64
	Requests         int
}

func (r result) String() string {
	return fmt.Sprintf("computed %d cached %d ttft p50 %.1f ms p95 %.1f ms total %.2f s preemptions %d",
		r.Computed, r.Cached, r.TTFTp50.Seconds()*1000, r.TTFTp95.Seconds()*1000, r.Total.Seconds(), r.Preemptions)
}

// replay builds a fresh stack over path (the cache on or off) and replays
// the workload once.
func (w workload) replay(ctx context.Context, path string, cache bool) (result, error) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := boot.Build(boot.Config{Model: path, Device: "cpu", DeviceMemory: w.DeviceMemory, Threads: w.Threads,
		MaxRunning: w.Conversations, MaxQueue: 4 * w.Conversations, ChunkedPrefill: w.Chunk, PageSize: 16,
		DisableRadixCache: !cache}, log, io.Discard)
	if err != nil {
		return result{}, err
	}
	defer s.Close(context.Background())
	vocab := s.Model.Config.Vocab
	system := make([]int32, w.System)
	for i := range system {
		system[i] = int32(100 + (i*7)%(vocab-100))
	}
	var (
		mu   sync.Mutex
		res  result
		ttft []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	start := time.Now()
	for c := range w.Conversations {
		wg.Go(func() {
			prompt := slices.Clone(system)
			for turn := range w.Turns {
				for j := range w.User {
					prompt = append(prompt, int32(100+(6000+c*977+turn*131+j*7)%(vocab-100)))
				}
				sent := time.Now()
				st, err := s.Engine.Submit(ctx, engine.Request{Prompt: slices.Clone(prompt), MaxTokens: w.Reply, IgnoreEOS: true})
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				first := true
				for ev := range st.Events {
					mu.Lock()
					switch {
					case ev.Err != nil:
						errs = append(errs, ev.Err)
					case ev.Done:
						res.Computed += ev.PromptTokens - ev.CachedTokens
						res.Cached += ev.CachedTokens
						res.Requests++
					default:
						if first {
							ttft = append(ttft, time.Since(sent))
							first = false
						}
						prompt = append(prompt, ev.Token)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	res.Total = time.Since(start)
	if len(errs) > 0 {
		return result{}, fmt.Errorf("%d requests failed, first: %w", len(errs), errs[0])
	}
	if want := w.Conversations * w.Turns; res.Requests != want || len(ttft) != want {
		return result{}, fmt.Errorf("%d requests finished (%d first tokens), want %d", res.Requests, len(ttft), want)
	}
	sort.Slice(ttft, func(i, j int) bool { return ttft[i] < ttft[j] })
	res.TTFTp50, res.TTFTp95 = ttft[len(ttft)/2], ttft[len(ttft)*95/100]
	res.Preemptions = s.Engine.Stats().Preemptions
	return res, nil
}

// presetModel is the gen-model preset's f32 file, written once to the
// directory the model benchmarks cache theirs in (host/model benchModel).
func presetModel(size string) (string, error) {
	dir := filepath.Join(os.TempDir(), "kvhost-bench-models")
	path := filepath.Join(dir, size+"-f32.gguf")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	spec, err := synth.Preset(size, "f32")
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := synth.Write(bw, spec, nil); err != nil {
		f.Close()
		return "", err
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp, path)
}

// median of v (not empty), sorting a copy.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
