package model

import (
	"math"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/kv"
)

// TestDecodeGraphsEqualEager: for every bucket size (and sizes that pad to
// it), greedy decoding through captured graphs produces the eager forward's
// tokens, with logits equal within float rounding.
func TestDecodeGraphsEqualEager(t *testing.T) {
	path := writeTiny(t, "f32")
	r := load(t, path, 512)
	buckets := []int{1, 2, 4, 8}
	g, err := r.m.CaptureDecodeGraphs(r.pools, buckets)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	V := r.m.Config.Vocab
	for n := 1; n <= 8; n++ {
		// Prefill n prompts twice: one copy decodes eagerly, one via graphs.
		type side struct {
			seqs   []Seq
			logits []float32
		}
		var sides [2]side
		for s := range sides {
			for i := 0; i < n; i++ {
				prompt := []int32{1, int32(10 + i*7), int32(300 + i), int32(5000 + 13*i)}
				var pages []int32
				last := r.run(t, &pages, prompt, 0, 1)
				pages, err = r.pool.Grow(pages, len(prompt)+8)
				if err != nil {
					t.Fatal(err)
				}
				sides[s].seqs = append(sides[s].seqs, Seq{Tokens: []int32{int32(argmax32(last))}, Start: len(prompt), Pages: one(pages), LogitRows: 1})
			}
			sides[s].logits = make([]float32, n*V)
		}
		for step := 0; step < 6; step++ {
			if err := r.m.Forward(r.pools, sides[0].seqs, sides[0].logits); err != nil {
				t.Fatal(err)
			}
			ok, err := g.Run(sides[1].seqs, sides[1].logits)
			if err != nil || !ok {
				t.Fatalf("n=%d: graph run %v %v", n, ok, err)
			}
			for i := 0; i < n; i++ {
				a, b := sides[0].logits[i*V:(i+1)*V], sides[1].logits[i*V:(i+1)*V]
				var d float64
				for j := range a {
					d = math.Max(d, math.Abs(float64(a[j]-b[j])))
				}
				if d > 1e-4 {
					t.Fatalf("n=%d step %d seq %d: graph logits differ from eager by %g", n, step, i, d)
				}
				ta, tb := argmax32(a), argmax32(b)
				if ta != tb {
					t.Fatalf("n=%d step %d seq %d: eager token %d, graph token %d", n, step, i, ta, tb)
				}
				for s := range sides {
					sides[s].seqs[i].Tokens[0] = int32(ta)
					sides[s].seqs[i].Start++
				}
			}
		}
		for s := range sides {
			for _, q := range sides[s].seqs {
				r.pool.Release(q.Pages[0])
			}
		}
	}
	if rep, pad := g.Stats(); rep != 48 || pad != 6*(1+3+2+1) {
		t.Fatalf("replays %d padded rows %d", rep, pad)
	}
	// A batch beyond the largest bucket is left to the eager path.
	if ok, _ := g.Run(make([]Seq, 9), make([]float32, 9*V)); ok {
		t.Fatal("ran a batch of 9 through graphs of at most 8")
	}
}

// TestGraphPoolIsLargestBucket: capturing smaller buckets after the largest
// adds nothing to the private pool.
func TestGraphPoolIsLargestBucket(t *testing.T) {
	path := writeTiny(t, "f32")
	r := load(t, path, 512)
	only, err := r.m.CaptureDecodeGraphs(r.pools, []int{16})
	if err != nil {
		t.Fatal(err)
	}
	largest := only.PoolBytes()
	captured := only.graphs[16]
	if captured.Launches() == 0 {
		t.Fatal("the batch-16 graph recorded no launches")
	}
	only.Close()
	if captured.Launches() != 0 {
		t.Fatalf("Close left the graph holding %d launches", captured.Launches())
	}
	all, err := r.m.CaptureDecodeGraphs(r.pools, []int{1, 2, 4, 8, 12, 16})
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	if all.PoolBytes() != largest {
		t.Fatalf("pool for all buckets %d bytes, largest bucket alone %d", all.PoolBytes(), largest)
	}
	if largest == 0 {
		t.Fatal("graph pool is empty")
	}
	// Graph memory is categorised as such.
	if st := r.act.Stats(); st.ByCategory[alloc.Graph] == 0 {
		t.Fatal("no graph-category bytes")
	}
}

func BenchmarkDecodeGraphs(b *testing.B) {
	for _, sh := range benchShapes {
		for _, batch := range []int{1, 16} {
			b.Run(sh.size+"-"+sh.dtype+"/batch="+itoa(batch), func(b *testing.B) {
				r := loadKV(b, benchModel(b, sh.size, sh.dtype), 2048+16, benchKV) // 16 contexts + the padding page
				g, err := r.m.CaptureDecodeGraphs(r.pools, []int{batch})
				if err != nil {
					b.Fatal(err)
				}
				defer g.Close()
				seqs := make([]Seq, batch)
				for i := range seqs {
					pages, err := r.pool.Grow(nil, r.m.Config.ContextLen)
					if err != nil {
						b.Fatal(err)
					}
					seqs[i] = Seq{Tokens: []int32{int32(1 + i)}, Start: 64, Pages: one(pages), LogitRows: 1}
				}
				// Positions walk as in BenchmarkDecode, so the two compare.
				logits := make([]float32, batch*r.m.Config.Vocab)
				V := r.m.Config.Vocab
				step := func() {
					for i := range seqs {
						if seqs[i].Start >= 64+decodeSpan {
							seqs[i].Start = 64
						}
					}
					if ok, err := g.Run(seqs, logits); !ok || err != nil {
						b.Fatal(ok, err)
					}
					for i := range seqs {
						seqs[i].Tokens[0] = int32(argmax32(logits[i*V : (i+1)*V]))
						seqs[i].Start++
					}
				}
				for range decodeSpan { // untimed: fault the span's KV pages in (see BenchmarkDecode)
					step()
				}
				timeDecode(b, step, batch)
			})
		}
	}
}

// TestDecodeStepsDoNotAllocate: once warm, an eager decode step (a batch
// of three one-token sequences through Forward) and a graph replay allocate
// nothing on the Go heap, for a plain and a quantized model.
func TestDecodeStepsDoNotAllocate(t *testing.T) {
	for _, dtype := range []string{"f32", "q4_k_m"} {
		t.Run(dtype, func(t *testing.T) {
			r := load(t, writeTiny(t, dtype), 64)
			seqs := make([]Seq, 3)
			for i := range seqs {
				pages, err := r.pool.Grow(nil, 64)
				if err != nil {
					t.Fatal(err)
				}
				seqs[i] = Seq{Tokens: []int32{int32(5 + i)}, Start: 10 + i, Pages: one(pages), LogitRows: 1}
			}
			assertDecodeAllocFree(t, r.m, r.pools, seqs)
		})
	}
}

// TestArchDecodeStepsDoNotAllocate is TestDecodeStepsDoNotAllocate for the
// other architectures' tiny generated models: sliding windows and sinks
// (Gemma 2/3, gpt-oss's experts), grouped experts (qwen3moe), latent
// attention (deepseek2/3) and the hybrids' recurrent state (nemotron_h,
// granitehybrid with and without experts).
func TestArchDecodeStepsDoNotAllocate(t *testing.T) {
	for _, a := range swaArchs {
		t.Run(a.arch, func(t *testing.T) {
			r := loadSWA(t, writeSWA(t, a.arch, "tiny"), a.hf, 64)
			assertDecodeAllocFree(t, r.m, r.pools, decodeBatch(t, r.pools, 3))
		})
	}
	for _, arch := range []string{"qwen3moe", "deepseek2", "deepseek3"} {
		t.Run(arch, func(t *testing.T) {
			r := load(t, writeArch(t, arch, "tiny", 0), 64)
			assertDecodeAllocFree(t, r.m, r.pools, decodeBatch(t, r.pools, 3))
		})
	}
	for _, arch := range hybridArchs {
		t.Run(arch, func(t *testing.T) {
			r := hybridRig(t, writeHybrid(t, arch, "tiny"))
			pools := hybridPools(t, r, 4, 32, false)
			assertDecodeAllocFree(t, r.m, pools, decodeBatch(t, pools, 3))
		})
	}
}

// decodeBatch is n one-token sequences at positions 10.., each holding
// pages for 64 tokens in every token pool and a slot in every state pool.
func decodeBatch(t *testing.T, pools *kv.Set, n int) []Seq {
	t.Helper()
	seqs := make([]Seq, n)
	for i := range seqs {
		seqs[i] = Seq{Tokens: []int32{int32(5 + i)}, Start: 10 + i, LogitRows: 1}
		for _, p := range pools.TokenPools() {
			pages, err := p.Grow(nil, 64)
			if err != nil {
				t.Fatal(err)
			}
			seqs[i].Pages = append(seqs[i].Pages, pages)
		}
		for _, p := range pools.SlotPools() {
			slot, err := p.Acquire()
			if err != nil {
				t.Fatal(err)
			}
			seqs[i].Slots = append(seqs[i].Slots, slot)
		}
	}
	return seqs
}

// assertDecodeAllocFree checks that, once warm, an eager decode step of
// seqs through Forward and a replay of the captured graph allocate nothing
// on the Go heap.
func assertDecodeAllocFree(t *testing.T, m *Model, pools *kv.Set, seqs []Seq) {
	t.Helper()
	logits := make([]float32, len(seqs)*m.Config.Vocab)
	step := func() {
		if err := m.Forward(pools, seqs, logits); err != nil {
			t.Fatal(err)
		}
	}
	step()
	if n := testing.AllocsPerRun(10, step); n != 0 {
		t.Errorf("eager decode step: %v allocations", n)
	}
	g, err := m.CaptureDecodeGraphs(pools, []int{len(seqs)})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	replay := func() {
		if ok, err := g.Run(seqs, logits); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	replay()
	if n := testing.AllocsPerRun(10, replay); n != 0 {
		t.Errorf("graph step: %v allocations", n)
	}
}
