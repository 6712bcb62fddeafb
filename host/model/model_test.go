package model

import (
	"flag"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/sdk"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

type rig struct {
	dev   *cpu.Device
	m     *Model
	pools *kv.Set  // declared by the mha configurator's arithmetic
	pool  *kv.Pool // its one token pool
	act   *alloc.Allocator
	arena *alloc.Direct
}

// one is the page tables of a sequence over the rig's single token pool.
func one(pages []int32) [][]int32 { return [][]int32{pages} }

func load(t testing.TB, path string, pages int) *rig {
	t.Helper()
	return loadKV(t, path, pages, sdk.KVFP32)
}

// loadKV is load with the KV cache in encoding kvd.
func loadKV(t testing.TB, path string, pages int, kvd string) *rig {
	t.Helper()
	// Kernel threads follow GOMAXPROCS, so `-cpu N` sets a benchmark's
	// threads (bench-compare's -threads); mmap: untouched pages cost nothing.
	dev, err := cpu.New(device.Options{MemoryBytes: 8 << 30, Threads: runtime.GOMAXPROCS(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	r := &rig{dev: dev, act: alloc.New("caching", dev), arena: alloc.NewDirect("kv", dev)}
	r.m, err = Load(path, Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: r.act})
	if err != nil {
		t.Fatal(err)
	}
	r.pools = kvtest.MHA(t, r.arena, r.m.Config.KVNeeds(), kvd, 16, pages)
	r.pool = r.pools.TokenPools()[0]
	return r
}

// run feeds tokens at start for one sequence (growing its pages) and returns
// the logits of the last logitRows positions.
func (r *rig) run(t testing.TB, pages *[]int32, tokens []int32, start, logitRows int) []float32 {
	t.Helper()
	var err error
	*pages, err = r.pool.Grow(*pages, start+len(tokens))
	if err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, logitRows*r.m.Config.Vocab)
	if err := r.m.Forward(r.pools, []Seq{{Tokens: tokens, Start: start, Pages: one(*pages), LogitRows: logitRows}}, logits); err != nil {
		t.Fatal(err)
	}
	return logits
}

func maxDiff(a []float32, b []float64) float64 {
	var d float64
	for i := range a {
		d = math.Max(d, math.Abs(float64(a[i])-b[i]))
	}
	return d
}

// TestStories260KMatchesFloat64Reference checks every logit of a chunked
// prefill and of 40 decode steps against the independent float64 forward.
func TestStories260KMatchesFloat64Reference(t *testing.T) {
	path := storiesPath(t)
	r := load(t, path, 64)
	ref := newRefModel(t, path)
	prompt, err := r.m.Tokenizer.Encode("Once upon a time", true)
	if err != nil {
		t.Fatal(err)
	}
	var refRows [][]float64
	for _, tok := range prompt {
		refRows = append(refRows, ref.step(tok))
	}
	var pages []int32
	// Chunked prefill with logits for every prompt row (input logprobs).
	split := len(prompt) / 2
	got := r.run(t, &pages, prompt[:split], 0, split)
	got = append(got, r.run(t, &pages, prompt[split:], split, len(prompt)-split)...)
	V := r.m.Config.Vocab
	worst := 0.0
	for i := range prompt {
		worst = math.Max(worst, maxDiff(got[i*V:(i+1)*V], refRows[i]))
	}
	last := got[(len(prompt)-1)*V:]
	// Decode: feed the model's greedy token to both and compare.
	pos := len(prompt)
	for step := 0; step < 40; step++ {
		next := int32(0)
		for i, v := range last {
			if v > last[next] {
				next = int32(i)
			}
		}
		want := ref.step(next)
		last = r.run(t, &pages, []int32{next}, pos, 1)
		worst = math.Max(worst, maxDiff(last, want))
		pos++
	}
	t.Logf("max |logit - float64 reference| over %d rows: %.3g", len(prompt)+40, worst)
	if worst > 1e-4 {
		t.Fatalf("logits differ from the float64 reference by %.3g > 1e-4", worst)
	}
}

// TestStories260KGreedyStory: 128 greedy tokens after "Once upon a time"
// equal the float64 reference's greedy choice at every step and the golden
// story in testdata (produced by this test with -update and read by a person:
// a coherent children's story).
func TestStories260KGreedyStory(t *testing.T) {
	path := storiesPath(t)
	r := load(t, path, 64)
	ref := newRefModel(t, path)
	prompt, _ := r.m.Tokenizer.Encode("Once upon a time", true)
	var refLogits []float64
	for _, tok := range prompt {
		refLogits = ref.step(tok)
	}
	var pages []int32
	logits := r.run(t, &pages, prompt, 0, 1)
	var out []int32
	for step := 0; step < 128; step++ {
		next := int32(0)
		for i, v := range logits {
			if v > logits[next] {
				next = int32(i)
			}
		}
		if want := argmax64(refLogits); next != want {
			t.Fatalf("step %d: greedy token %d, float64 reference %d", step, next, want)
		}
		out = append(out, next)
		refLogits = ref.step(next)
		logits = r.run(t, &pages, []int32{next}, len(prompt)+step, 1)
	}
	text, err := r.m.Tokenizer.Decode(out)
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "stories260K_once_upon_a_time.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if text != string(want) {
		t.Fatalf("greedy story changed:\n got: %q\nwant: %q", text, want)
	}
	if !strings.Contains(text, "Lily") {
		t.Fatalf("not the expected story: %q", text)
	}
}
