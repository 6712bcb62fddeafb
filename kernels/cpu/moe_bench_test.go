package cpu

import (
	"fmt"
	"testing"
)

// BenchmarkRoute routes a decode step (1 token) and a prefill chunk (512
// tokens, on one thread and on two) with DeepSeek-V3's router (256 experts,
// 8 groups, sigmoid + bias) and Qwen3-MoE's (128 experts, softmax).
func BenchmarkRoute(b *testing.B) {
	pool := NewPool(2)
	defer pool.Close()
	for _, name := range []string{"deepseek-v3", "qwen3-moe"} {
		rt := routers[name]
		for _, c := range []struct {
			n int
			p *Pool
		}{{1, nil}, {512, nil}, {512, pool}} {
			n, p := c.n, c.p
			r := newRand(1)
			logits := spreadLogits(r, n, rt.Experts, 0.05)
			work := make([]float32, len(logits))
			bias := randVec(r, rt.Experts, 0.01)
			ids := make([]int32, n*rt.TopK)
			w := make([]float32, n*rt.TopK)
			b.Run(fmt.Sprintf("%s/n=%d/threads=%d", name, n, p.Threads()), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					copy(work, logits)
					p.Route(rt, work, n, bias, ids, w)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			})
		}
	}
}

// BenchmarkGroupScatter groups a step's choices by expert and scatter-adds
// DeepSeek-V3-sized expert outputs (hidden 7168, top 8) back to the tokens.
func BenchmarkGroupScatter(b *testing.B) {
	p := NewPool(2)
	defer p.Close()
	const experts, k, dim = 256, 8, 7168
	for _, n := range []int{1, 64} {
		r := newRand(2)
		ids := make([]int32, n*k)
		for i := range n {
			for j, e := range r.Perm(experts)[:k] {
				ids[i*k+j] = int32(e)
			}
		}
		w := randVec(r, n*k, 1)
		g := NewExpertGroups(experts, k, n)
		y := randVec(r, n*k*dim, 1)
		out := make([]float32, n*dim)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(4 * (n*k*dim + n*dim)))
			for b.Loop() {
				if err := g.Group(ids, w, n); err != nil {
					b.Fatal(err)
				}
				p.ScatterAdd(out, y, dim, g, true)
			}
		})
	}
}
