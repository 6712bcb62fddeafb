package budget

import "testing"

func BenchmarkKVBudgetAndTokens(b *testing.B) {
	b.ReportAllocs()
	in := KVBudgetInput{PBytes: v3P, ABytes: v3A, MemFractionStatic: 0.85}
	for b.Loop() {
		kv, err := KVBudget(in)
		if err != nil {
			b.Fatal(err)
		}
		if Tokens(kv.BudgetBytes, 131072, 1, 0) != 426659 {
			b.Fatal("wrong T")
		}
	}
}

func BenchmarkPostCaptureKVNoOvercommit(b *testing.B) {
	b.ReportAllocs()
	in := v14Input()
	for b.Loop() {
		if _, err := PostCaptureKVNoOvercommit(in); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMemFractionStatic(b *testing.B) {
	b.ReportAllocs()
	in := ReserveInput{GPUMemMiB: memH100, TP: 8}
	for b.Loop() {
		if MemFractionStatic(in) != 0.812 {
			b.Fatal("wrong f")
		}
	}
}
