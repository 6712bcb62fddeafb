package radix_test

import (
	"runtime"
	"testing"

	"github.com/kvhost/kvhost/host/kv/radix"
)

// nopOwner counts nothing: the benchmarks time the tree alone.
type nopOwner struct{}

func (nopOwner) Shared(int, int32) bool { return false }
func (nopOwner) Retain(int, []int32)    {}
func (nopOwner) Release(int, []int32)   {}

const (
	benchSeqs   = 10_000
	benchSystem = 1024 // shared system prompt
	benchOwn    = 512  // each conversation's own tokens
	benchPage   = 16
)

// cachedTree caches benchSeqs conversations of a shared system prompt and
// their own tokens (page 16: 64 + 32 pages each, 10,000 leaves).
func cachedTree(b *testing.B, obs radix.Observer, hash radix.Hasher) (*radix.Tree, [][]int32) {
	b.Helper()
	tree, err := radix.New(radix.Config{Pools: []radix.Pool{{Name: "kv", Kind: radix.Full, PageSize: benchPage}}, Owner: nopOwner{}, Observer: obs, Hash: hash})
	if err != nil {
		b.Fatal(err)
	}
	seqs := make([][]int32, benchSeqs)
	table := make([]int32, (benchSystem+benchOwn)/benchPage)
	for i := range table {
		table[i] = int32(i)
	}
	for i := range seqs {
		seqs[i] = append(toks(benchSystem, 1), toks(benchOwn, int32(100_000+i*benchOwn))...)
		tree.Insert(seqs[i], [][]int32{table}, nil)
	}
	if st := tree.Stats(); st.Tokens != benchSystem+benchSeqs*benchOwn {
		b.Fatalf("cached %d tokens", st.Tokens)
	}
	runtime.GC() // the set-up's garbage is not the benchmark's
	return tree, seqs
}

// BenchmarkMatch: the admission lookup of a follow-up turn (its
// conversation plus 100 new tokens) among 10,000 cached conversations.
func BenchmarkMatch(b *testing.B) {
	tree, seqs := cachedTree(b, nil, nil)
	var pre radix.Prefix
	prompts := make([][]int32, 64)
	for i := range prompts {
		prompts[i] = append(append([]int32(nil), seqs[i*97]...), toks(100, 7)...)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tree.Match(prompts[i%len(prompts)], &pre)
	}
	if pre.Tokens != benchSystem+benchOwn {
		b.Fatalf("hit %d", pre.Tokens)
	}
	b.ReportMetric(float64(benchSystem+benchOwn), "hit-tokens/op")
}

// BenchmarkMatchSystemOnly: a new conversation that shares only the
// system prompt (the lookup passes the 10,000-way branch).
func BenchmarkMatchSystemOnly(b *testing.B) {
	tree, _ := cachedTree(b, nil, nil)
	var pre radix.Prefix
	prompt := append(toks(benchSystem, 1), toks(300, 5)...)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tree.Match(prompt, &pre)
	}
	if pre.Tokens != benchSystem {
		b.Fatalf("hit %d", pre.Tokens)
	}
}

// BenchmarkLockUnlock: locking an admitted hit and releasing it.
func BenchmarkLockUnlock(b *testing.B) {
	tree, seqs := cachedTree(b, nil, nil)
	var pre radix.Prefix
	tree.Match(seqs[42], &pre)
	h := tree.Lock(&pre)
	tree.Unlock(h)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tree.Relock(h)
		tree.Unlock(h)
	}
}

// BenchmarkInsertEvict: a finished conversation inserted into a cache of
// 10,000 and the least recently used one evicted to make room, the steady
// state of a full cache.
func BenchmarkInsertEvict(b *testing.B) {
	benchInsertEvict(b, nil, nil)
}

// BenchmarkInsertEvictEvents is BenchmarkInsertEvict with block digests
// and an observer (KV events on).
func BenchmarkInsertEvictEvents(b *testing.B) {
	benchInsertEvict(b, nopObserver{}, hashTokens)
}

type nopObserver struct{}

func (nopObserver) BlocksStored(*radix.Digest, []radix.Digest, []int32) {}
func (nopObserver) BlocksRemoved([]radix.Digest)                        {}
func (nopObserver) AllCleared()                                         {}

func benchInsertEvict(b *testing.B, obs radix.Observer, hash radix.Hasher) {
	tree, _ := cachedTree(b, obs, hash)
	table := make([]int32, (benchSystem+benchOwn)/benchPage)
	prompt := append(toks(benchSystem, 1), toks(benchOwn, 0)...)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := benchSystem; j < len(prompt); j++ {
			prompt[j] = int32(-1_000_000 - i*benchOwn - j)
		}
		tree.Insert(prompt, [][]int32{table}, nil)
		tree.Evict(0, benchOwn/benchPage)
	}
}
