package cpu

import (
	"fmt"
	"math"
	"testing"
)

// refAttention gathers the sequence's K/V contiguously from the given
// position→slot map and runs naive float64 causal softmax attention.
func refAttention(q []float32, n, nHeads int, k, v []float32, kvHeads, hd, startPos int, scale float64) []float64 {
	out := make([]float64, n*nHeads*hd)
	group := nHeads / kvHeads
	for i := range n {
		last := startPos + i
		for h := range nHeads {
			kh := h / group
			qo := i*nHeads*hd + h*hd
			s := make([]float64, last+1)
			mx := math.Inf(-1)
			for p := range s {
				var d float64
				for j := range hd {
					d += float64(q[qo+j]) * float64(k[p*kvHeads*hd+kh*hd+j])
				}
				s[p] = d * scale
				mx = math.Max(mx, s[p])
			}
			var sum float64
			for p := range s {
				s[p] = math.Exp(s[p] - mx)
				sum += s[p]
			}
			for p := range s {
				for j := range hd {
					out[qo+j] += s[p] / sum * float64(v[p*kvHeads*hd+kh*hd+j])
				}
			}
		}
	}
	return out
}

func TestAttention(t *testing.T) {
	pools := []*Pool{nil, NewPool(2), NewPool(3)}
	defer func() {
		for _, p := range pools {
			p.Close()
		}
	}()
	impls(t, func(t *testing.T) {
		for _, c := range []struct {
			name                    string
			nHeads, kvHeads, hd, ps int
			start, n                int
		}{
			{"prefill-gqa-ps1", 4, 2, 8, 1, 0, 20},
			{"prefill-gqa-ps16", 8, 2, 64, 16, 0, 37},
			{"chunked-prefill-ps16", 4, 1, 12, 16, 17, 9},
			{"decode-mha-ps16", 4, 4, 64, 16, 40, 1},
			{"decode-gqa-ps1", 8, 2, 20, 1, 63, 1},
			{"decode-long-ps16", 8, 1, 128, 16, 300, 1},
			{"chunked-prefill-ps6", 4, 2, 16, 6, 3, 22}, // groups of four and leftovers within a page
		} {
			t.Run(c.name, func(t *testing.T) {
				r := newRand(40)
				total := c.start + c.n
				pages := (total + c.ps - 1) / c.ps
				numPages := 2*pages + 3 // a larger cache; other slots hold garbage
				perm := r.Perm(numPages)
				pageTable := make([]int32, pages)
				for i := range pageTable {
					pageTable[i] = int32(perm[i])
				}
				w := c.kvHeads * c.hd
				kv := PagedKV{
					K: randVec(r, numPages*c.ps*w, 50), V: randVec(r, numPages*c.ps*w, 50),
					PageSize: c.ps, KVHeads: c.kvHeads, HeadDim: c.hd,
				}
				k := randVec(r, total*w, 1)
				v := randVec(r, total*w, 1)
				// Write in two chunks as a prefill then continuation would.
				WriteKV(kv, k, v, c.start, pageTable, 0)
				WriteKV(kv, k[c.start*w:], v[c.start*w:], c.n, pageTable, c.start)
				q := randVec(r, c.n*c.nHeads*c.hd, 3)
				scale := 1 / math.Sqrt(float64(c.hd))
				want := refAttention(q, c.n, c.nHeads, k, v, c.kvHeads, c.hd, c.start, scale)
				for pi, p := range pools {
					out := make([]float32, len(q))
					scratch := make([]float32, AttentionScratch(p, c.n, c.start))
					p.Attention(out, q, c.n, c.nHeads, kv, pageTable, c.start, float32(scale), scratch)
					for i := range out {
						if !near(out[i], want[i], 2e-5) {
							t.Fatalf("pool %d out[%d] = %v, want %v", pi, i, out[i], want[i])
						}
					}
				}
			})
		}
	})
}

func TestAttentionPanics(t *testing.T) {
	kv := PagedKV{K: make([]float32, 64), V: make([]float32, 64), PageSize: 4, KVHeads: 2, HeadDim: 4}
	q := make([]float32, 12)
	for name, f := range map[string]func(){
		"heads not multiple": func() { (*Pool)(nil).Attention(q, q, 1, 3, kv, []int32{0}, 0, 1, make([]float32, 8)) },
		"short scratch":      func() { (*Pool)(nil).Attention(q, q, 1, 2, kv, []int32{0, 1}, 5, 1, make([]float32, 5)) },
		"slot outside cache": func() { WriteKV(kv, q, q, 1, []int32{2}, 0) },
		"short page table":   func() { (*Pool)(nil).Attention(q, q, 1, 2, kv, []int32{0}, 5, 1, make([]float32, 8)) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil {
					t.Fatal("no panic")
				} else if s := fmt.Sprint(r); len(s) < 5 || s[:4] != "cpu:" {
					t.Fatalf("panic %q is not package-prefixed", s)
				}
			}()
			f()
		})
	}
}
