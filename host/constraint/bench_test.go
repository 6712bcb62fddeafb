package constraint_test

import (
	"context"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/kvhost/kvhost/host/constraint"
	"github.com/kvhost/kvhost/host/constraint/compile"
	"github.com/kvhost/kvhost/host/model/synth"
	"github.com/kvhost/kvhost/host/model/tokenizer"
	"github.com/kvhost/kvhost/host/plugin"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

var bpeOnce struct {
	sync.Once
	vocab *grammar.Vocab
	err   error
}

// bpeVocab is gen-model's byte-level BPE vocabulary of 128256 pieces
// (Llama 3's size), as the constraint sees it.
func bpeVocab(b *testing.B) *grammar.Vocab {
	bpeOnce.Do(func() {
		v, err := synth.NewBPEVocab(128256)
		if err != nil {
			bpeOnce.err = err
			return
		}
		tok, err := tokenizer.NewBPE(tokenizer.BPEConfig{Tokens: v.Tokens, Types: v.Types, Merges: v.Merges,
			PreTokenizer: tokenizer.PreGPT2, BOS: int32(v.BOS), EOS: int32(v.EOS), ExtraEOG: []int32{int32(v.EOT)}})
		if err != nil {
			bpeOnce.err = err
			return
		}
		wire, _, err := constraint.Vocab(tok, len(v.Tokens))
		if err != nil {
			bpeOnce.err = err
			return
		}
		bpeOnce.vocab, bpeOnce.err = grammar.DecodeVocab(wire)
	})
	if bpeOnce.err != nil {
		b.Fatal(bpeOnce.err)
	}
	return bpeOnce.vocab
}

// paths draws token sequences the grammar allows, uniformly among the
// allowed tokens, each closing within budget tokens.
func paths(b *testing.B, p *grammar.Program, n, budget int) [][]int32 {
	r := rand.New(rand.NewPCG(1, 2))
	v := p.Vocab()
	var out [][]int32
	var allowed []int32
	for range n {
		m := p.Start()
		var path []int32
		for left := budget; left > 0; left-- {
			mk, err := m.Mask(left)
			if err != nil {
				b.Fatal(err)
			}
			if mk.Complete {
				break
			}
			allowed = allowed[:0]
			for w, bits := range mk.Bits {
				for ; bits != 0; bits &= bits - 1 {
					id := int32(w*32 + trailing(bits))
					if !v.IsEOG(id) {
						allowed = append(allowed, id)
					}
				}
			}
			id := allowed[r.IntN(len(allowed))]
			if err := m.Advance(id); err != nil {
				b.Fatal(err)
			}
			path = append(path, id)
		}
		out = append(out, path)
	}
	return out
}

func trailing(x uint32) int {
	n := 0
	for x&1 == 0 {
		x >>= 1
		n++
	}
	return n
}

// BenchmarkMaskStep is issue 19's mask benchmark: one decode step's
// constraint work (consume the token, produce the mask) for the
// 10-property JSON Schema (testdata/schemas/19-ten-properties.json) over a
// 128256-token byte-level BPE vocabulary. "warm": the program has seen
// these states before (every later sequence of a request and every later
// request with the same schema); "cold": a fresh program computes each
// state's mask by walking the token trie.
func BenchmarkMaskStep(b *testing.B) {
	v := bpeVocab(b)
	doc, err := os.ReadFile("testdata/schemas/19-ten-properties.json")
	if err != nil {
		b.Fatal(err)
	}
	g, err := compile.JSONSchema(doc)
	if err != nil {
		b.Fatal(err)
	}
	warm, err := grammar.Compile(g, v, grammar.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ps := paths(b, warm, 8, 120)
	steps := 0
	for _, p := range ps {
		steps += len(p)
	}
	run := func(b *testing.B, p *grammar.Program, path []int32) {
		m := p.Start()
		for i, id := range path {
			if _, err := m.Mask(len(path) - i + 8); err != nil {
				b.Fatal(err)
			}
			if err := m.Advance(id); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("warm", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			path := ps[n%len(ps)]
			run(b, warm, path)
			n++
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n*steps/len(ps))/1e3, "µs/step")
	})
	b.Run("cold", func(b *testing.B) {
		n, total := 0, 0
		for b.Loop() {
			p, err := grammar.Compile(g, v, grammar.Options{})
			if err != nil {
				b.Fatal(err)
			}
			path := ps[n%len(ps)]
			run(b, p, path)
			n++
			total += len(path)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total)/1e3, "µs/step")
	})
	b.Logf("vocab %d tokens, %d trie nodes; %d configurations after the warm paths", v.Size(), v.Nodes(), warm.Configs())
}

// BenchmarkPluginMaskStep is BenchmarkMaskStep through the constraint
// plugin (wazero, Go guest): the same 10-property schema and 128256-token
// vocabulary, one row per step call (warm: the paths' states are cached
// in the instance).
func BenchmarkPluginMaskStep(b *testing.B) {
	v, err := synth.NewBPEVocab(128256)
	if err != nil {
		b.Fatal(err)
	}
	tok, err := tokenizer.NewBPE(tokenizer.BPEConfig{Tokens: v.Tokens, Types: v.Types, Merges: v.Merges,
		PreTokenizer: tokenizer.PreGPT2, BOS: int32(v.BOS), EOS: int32(v.EOS), ExtraEOG: []int32{int32(v.EOT)}})
	if err != nil {
		b.Fatal(err)
	}
	wasm, err := os.ReadFile("builtin/wasm/grammar.wasm")
	if err != nil {
		b.Fatalf("built by make plugins: %v", err)
	}
	rt, err := plugin.NewRuntime(context.Background(), plugin.Config{NoCache: true})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(context.Background())
	start := time.Now()
	pl, err := constraint.NewPlugin(context.Background(), rt, "grammar", wasm, tok, len(v.Tokens))
	if err != nil {
		b.Fatal(err)
	}
	defer pl.Close(context.Background())
	b.Logf("plugin loaded with the vocabulary in %v", time.Since(start).Round(time.Millisecond))
	doc, _ := os.ReadFile("testdata/schemas/19-ten-properties.json")
	g, err := compile.JSONSchema(doc)
	if err != nil {
		b.Fatal(err)
	}
	sp, err := constraint.NewSpec("json_schema", doc, g)
	if err != nil {
		b.Fatal(err)
	}
	native, err := grammar.Compile(g, bpeVocab(b), grammar.Options{})
	if err != nil {
		b.Fatal(err)
	}
	ps := paths(b, native, 8, 120)
	ctx := context.Background()
	walk := func(b *testing.B, path []int32) {
		q, err := pl.Open(ctx, sp)
		if err != nil {
			b.Fatal(err)
		}
		defer q.Close()
		rows := make([]constraint.Row, 1)
		tok := int32(-1)
		for i, id := range path {
			rows[0] = constraint.Row{Seq: q, Token: tok, Budget: len(path) - i + 8}
			pl.Step(ctx, rows)
			if rows[0].Err != nil {
				b.Fatal(rows[0].Err)
			}
			tok = id
		}
	}
	cold := time.Now()
	steps := 0
	for _, p := range ps {
		walk(b, p)
		steps += len(p)
	}
	b.Logf("first pass (cold states): %.1f µs/step over %d steps", float64(time.Since(cold).Microseconds())/float64(steps), steps)
	b.Run("warm", func(b *testing.B) {
		n, total := 0, 0
		for b.Loop() {
			p := ps[n%len(ps)]
			walk(b, p)
			n++
			total += len(p)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total)/1e3, "µs/step")
	})
}
