package model

import (
	"fmt"
	"testing"
)

// BenchmarkHybridDecode reports decode tokens/s of the generated hybrid
// models (small, medium) for batches of 1 and 8 sequences, each after a
// 64-token prompt: one Mamba-2 recurrence step per Mamba layer, attention
// over the few attention layers (eager: hybrids capture no decode graph).
func BenchmarkHybridDecode(b *testing.B) {
	for _, arch := range hybridArchs {
		for _, size := range []string{"small", "medium"} {
			for _, batch := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s-%s/batch=%d", arch, size, batch), func(b *testing.B) {
					r := hybridRig(b, writeHybrid(b, arch, size))
					pools := hybridPools(b, r, batch, batch*(64+b.N+16)/16+batch, false)
					V := r.m.Config.Vocab
					seqs := make([]*hybridSeq, batch)
					for i := range seqs {
						seqs[i] = newHybridSeq(b, pools)
						toks := make([]int32, 64)
						for j := range toks {
							toks[j] = int32(1 + (i*131+j*17)%(V-1))
						}
						seqs[i].run(b, r.m, toks, 1)
					}
					logits := make([]float32, batch*V)
					in := make([]Seq, batch)
					b.ReportAllocs()
					b.ResetTimer()
					for n := range b.N {
						for i, s := range seqs {
							in[i] = s.seq(b, []int32{int32(1 + (n*7+i)%(V-1))}, 1)
						}
						if err := r.m.Forward(pools, in, logits); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tok/s")
				})
			}
		}
	}
}

// BenchmarkHybridPrefill reports prompt tokens/s for one prompt of 512
// tokens in chunks of 512 (the chunked SSD scan for the Mamba layers).
func BenchmarkHybridPrefill(b *testing.B) {
	const n = 512
	for _, arch := range hybridArchs {
		for _, size := range []string{"small", "medium"} {
			b.Run(fmt.Sprintf("%s-%s/tokens=%d", arch, size, n), func(b *testing.B) {
				r := hybridRig(b, writeHybrid(b, arch, size))
				pools := hybridPools(b, r, 1, n/16+1, false)
				V := r.m.Config.Vocab
				toks := make([]int32, n)
				for j := range toks {
					toks[j] = int32(1 + j*97%(V-1))
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					s := newHybridSeq(b, pools)
					s.run(b, r.m, toks, 1)
					s.release()
				}
				b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}
