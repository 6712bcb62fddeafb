package cpu

import (
	"math/rand/v2"
	"testing"
)

// TestDecodeAttentionMatchesPerSequence: the batched decode kernels equal
// WriteKV + Attention run one sequence at a time.
func TestDecodeAttentionMatchesPerSequence(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	const ps, kvh, hd, heads, pages = 4, 2, 8, 4, 64
	mk := func() PagedKV {
		return PagedKV{K: make([]float32, pages*ps*kvh*hd), V: make([]float32, pages*ps*kvh*hd), PageSize: ps, KVHeads: kvh, HeadDim: hd}
	}
	a, b := mk(), mk()
	for i := range a.K {
		a.K[i], a.V[i] = r.Float32()-0.5, r.Float32()-0.5
	}
	copy(b.K, a.K)
	copy(b.V, a.V)
	positions := []int32{0, 5, 17, 9}
	perm := r.Perm(pages)
	tables := make([][]int32, len(positions))
	for i := range tables {
		for j := 0; j < 6; j++ {
			tables[i] = append(tables[i], int32(perm[i*6+j]))
		}
	}
	rows := len(positions)
	q := make([]float32, rows*heads*hd)
	k := make([]float32, rows*kvh*hd)
	v := make([]float32, rows*kvh*hd)
	for i := range q {
		q[i] = r.Float32() - 0.5
	}
	for i := range k {
		k[i], v[i] = r.Float32()-0.5, r.Float32()-0.5
	}
	for _, pool := range []*Pool{nil, NewPool(2)} {
		got := make([]float32, len(q))
		WriteKVRows(a, k, v, positions, tables)
		const maxLen = 24
		pool.DecodeAttention(got, q, heads, a, positions, tables, 0.3, make([]float32, DecodeAttentionScratch(pool, maxLen)), maxLen)
		want := make([]float32, len(q))
		for i, pos := range positions {
			w := kvh * hd
			WriteKV(b, k[i*w:(i+1)*w], v[i*w:(i+1)*w], 1, tables[i], int(pos))
			qw := heads * hd
			pool.Attention(want[i*qw:(i+1)*qw], q[i*qw:(i+1)*qw], 1, heads, b, tables[i], int(pos), 0.3, make([]float32, AttentionScratch(pool, 1, int(pos))))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("element %d: batched %v, per sequence %v", i, got[i], want[i])
			}
		}
		pool.Close()
	}
}
