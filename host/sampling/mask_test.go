package sampling

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestApplyMaskMatchesReference checks ApplyMask against a per-id loop, for
// rows that end inside a word, masks shorter and longer than the row, and
// deny lists with duplicates and ids out of range.
func TestApplyMaskMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for _, n := range []int{1, 31, 32, 33, 100, 1000} {
		for _, words := range []int{0, (n + 31) / 32, (n+31)/32 + 2, n / 64} {
			for trial := range 20 {
				mask := make([]uint32, words)
				for i := range mask {
					switch trial % 4 {
					case 0:
						mask[i] = r.Uint32()
					case 1:
						mask[i] = math.MaxUint32
					case 2:
						mask[i] = 0
					default:
						mask[i] = r.Uint32() & r.Uint32() & r.Uint32()
					}
				}
				deny := []int32{0, int32(n - 1), int32(n + 5), -1, 7, 7}
				row := make([]float32, n)
				for i := range row {
					row[i] = float32(r.NormFloat64())
				}
				want := append([]float32(nil), row...)
				wantN := 0
				for id := range n {
					ok := id/32 < len(mask) && mask[id/32]&(1<<(id%32)) != 0
					for _, d := range deny {
						if int(d) == id {
							ok = false
						}
					}
					if ok {
						wantN++
					} else {
						want[id] = float32(math.Inf(-1))
					}
				}
				got := ApplyMask(row, mask, deny)
				if got != wantN {
					t.Fatalf("n=%d words=%d trial %d: %d allowed, want %d", n, words, trial, got, wantN)
				}
				for i := range row {
					if row[i] != want[i] {
						t.Fatalf("n=%d words=%d trial %d: row[%d]=%v want %v", n, words, trial, i, row[i], want[i])
					}
				}
			}
		}
	}
}

func BenchmarkApplyMask(b *testing.B) {
	const vocab = 128256
	r := rand.New(rand.NewPCG(2, 2))
	row := make([]float32, vocab)
	for _, kind := range []string{"string-body", "few"} {
		mask := make([]uint32, (vocab+31)/32)
		for i := range mask {
			if kind == "few" {
				if i%500 == 0 {
					mask[i] = 1
				}
			} else {
				mask[i] = ^(r.Uint32() & r.Uint32() & r.Uint32() & r.Uint32())
			}
		}
		b.Run(kind, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ApplyMask(row, mask, []int32{2})
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e3, "µs/row")
		})
	}
}
