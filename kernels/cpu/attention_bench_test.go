package cpu

import (
	"fmt"
	"math"
	"testing"
)

// benchCache fills a cache of encoding t with positions 0..n-1 of one
// sequence (page size 16, pages in reverse order).
func benchCache(b *testing.B, t KVType, n, kvHeads, hd, vhd int, vInK bool) (PagedKV, []int32) {
	b.Helper()
	r := newRand(90)
	const ps = 16
	pages := (n + ps - 1) / ps
	kv := NewPagedKV(t, pages*ps, ps, kvHeads, hd, vhd, vInK)
	table := make([]int32, pages)
	for i := range table {
		table[i] = int32(pages - 1 - i)
	}
	WriteKV(kv, randVec(r, n*kvHeads*hd, 1), randVec(r, n*kvHeads*vhd, 1), n, table, 0)
	return kv, table
}

// attnModelShapes are gen-model's small and medium attention shapes
// (host/model/synth presets).
var attnModelShapes = []struct {
	name      string
	heads, hd int
}{{"small", 6, 48}, {"medium", 12, 64}}

// BenchmarkAttentionPrefill is one layer's attention over a whole prompt
// (ppN: N query rows over N positions) on two workers; tok/s is prompt
// tokens per second of this layer's attention alone.
func BenchmarkAttentionPrefill(b *testing.B) {
	for _, sh := range attnModelShapes {
		for _, kt := range []KVType{KVF32, KVF16, KVE4M3} {
			for _, n := range []int{128, 512, 2048} {
				b.Run(fmt.Sprintf("%s/%v/pp%d", sh.name, kt, n), func(b *testing.B) {
					kv, table := benchCache(b, kt, n, sh.heads, sh.hd, sh.hd, false)
					p := NewPool(2)
					defer p.Close()
					q := randVec(newRand(91), n*sh.heads*sh.hd, 1)
					out := make([]float32, len(q))
					scratch := make([]float32, AttentionScratch(p.Threads(), sh.hd, sh.hd))
					o := AttnOpts{Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
					b.ReportAllocs()
					for b.Loop() {
						p.Attention(out, q, n, sh.heads, kv, table, 0, o, scratch)
					}
					b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
				})
			}
		}
	}
}

// BenchmarkAttentionDecode is one layer's attention for one new token at
// the given position (batch 1), medium's MHA shape and DeepSeek's latent
// shape (16 heads over 512+64 rows); GB/s counts the cache bytes read.
func BenchmarkAttentionDecode(b *testing.B) {
	shapes := []struct {
		name                    string
		heads, kvHeads, hd, vhd int
		vInK                    bool
	}{{"medium", 12, 12, 64, 64, false}, {"mla16", 16, 1, 576, 512, true}}
	for _, sh := range shapes {
		for _, kt := range []KVType{KVF32, KVF16, KVBF16, KVE4M3, KVMXFP8, KVNVFP4} {
			for _, pos := range []int{512, 2048, 8192} {
				if sh.vInK && pos == 8192 {
					continue
				}
				b.Run(fmt.Sprintf("%s/%v/pos=%d", sh.name, kt, pos), func(b *testing.B) {
					kv, table := benchCache(b, kt, pos, sh.kvHeads, sh.hd, sh.vhd, sh.vInK)
					p := NewPool(2)
					defer p.Close()
					q := randVec(newRand(92), sh.heads*sh.hd, 1)
					out := make([]float32, sh.heads*sh.vhd)
					scratch := make([]float32, AttentionScratch(p.Threads(), sh.hd, sh.vhd))
					o := AttnOpts{Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
					positions, tables := []int32{int32(pos - 1)}, [][]int32{table}
					b.ReportAllocs()
					for b.Loop() {
						p.DecodeAttention(out, q, sh.heads, kv, positions, tables, o, scratch)
					}
					bytes := float64(len(kv.K) + len(kv.V) + len(kv.KScale) + len(kv.VScale))
					b.ReportMetric(bytes*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
				})
			}
		}
	}
}
