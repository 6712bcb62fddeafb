package model

import (
	"testing"
)

// TestSWADecodeGraphsMatchEager: each sliding-window architecture's
// captured decode step (window, soft-caps, sinks, experts, the trunk's
// scale and cap) replays to the eager forward's logits exactly, two
// sequences at a time far past the window with window pages released.
func TestSWADecodeGraphsMatchEager(t *testing.T) {
	for _, a := range swaArchs {
		t.Run(a.arch, func(t *testing.T) {
			path := writeSWA(t, a.arch, "tiny")
			eager, graphs := loadSWA(t, path, a.hf, 64), loadSWA(t, path, a.hf, 64)
			g, err := graphs.m.CaptureDecodeGraphs(graphs.pools, []int{1, 2})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			V := eager.m.Config.Vocab
			var es, gs [2]*swaSeq
			var next [2]int32
			for i := range es {
				es[i], gs[i] = &swaSeq{r: eager}, &swaSeq{r: graphs}
				defer es[i].release()
				defer gs[i].release()
				prompt := []int32{int32(5 + i), 40, 41, 42, int32(100 + i)}
				l := es[i].forward(t, prompt, 0, 1)
				if gl := gs[i].forward(t, prompt, 0, 1); relDiff(gl, f64(l)) != 0 {
					t.Fatalf("sequence %d: prefill differs", i)
				}
				next[i] = int32(argmax32(l))
			}
			for pos := 5; pos < 45; pos++ {
				var seqs []Seq
				for i := range gs {
					seqs = append(seqs, gs[i].step(t, next[i], pos))
				}
				logits := make([]float32, 2*V)
				if ok, err := g.Run(seqs, logits); err != nil || !ok {
					t.Fatalf("graph run at %d: %v %v", pos, ok, err)
				}
				for i := range es {
					want := es[i].forward(t, []int32{next[i]}, pos, 1)
					if d := relDiff(logits[i*V:(i+1)*V], f64(want)); d != 0 {
						t.Fatalf("position %d sequence %d: graph logits differ from eager by %g relative", pos, i, d)
					}
					next[i] = int32(argmax32(want))
				}
			}
		})
	}
}

func f64(v []float32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

// step readies one decode row at pos (growing and trimming the tables as
// forward does) without running it.
func (s *swaSeq) step(t *testing.T, tok int32, pos int) Seq {
	t.Helper()
	for i, p := range s.r.pools.TokenPools() {
		p.Trim(s.tables[i], pos-p.Window()+1)
		var err error
		if s.tables[i], err = p.Grow(s.tables[i], pos+1); err != nil {
			t.Fatal(err)
		}
	}
	return Seq{Tokens: []int32{tok}, Start: pos, Pages: s.tables, LogitRows: 1}
}
