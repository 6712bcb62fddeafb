package cpu

import "testing"

func TestHotPathsDoNotAllocate(t *testing.T) {
	r := newRand(50)
	p := NewPool(2)
	defer p.Close()
	w := makeMatrix(t, r, Q8_0, 64, 128)
	x := randVec(r, 16*128, 1)
	out := make([]float32, 16*64)
	kv := NewPagedKV(KVF16, 64, 16, 2, 16, 16, false)
	mx := NewPagedKV(KVMXFP8, 256, 16, 1, 32, 32, true) // one KV head, 201 positions: split over the workers
	long := make([]int32, 16)
	for i := range long {
		long[i] = int32(15 - i)
	}
	pt := []int32{3, 1, 0, 2}
	q := randVec(r, 4*4*16, 1)
	ao := make([]float32, len(q))
	scratch := make([]float32, AttentionScratch(p.Threads(), 32, 32))
	tables, at := [][]int32{long}, []int32{200}
	opts := AttnOpts{Scale: 0.25, Window: 150, SoftCap: 10, Sinks: []float32{1, 2, 3, 4}}
	rope, err := NewRope(16, 16, 10000, RopeScaling{}, RopeNeox)
	if err != nil {
		t.Fatal(err)
	}
	pos := []int32{40, 41, 42, 43}
	nw := randVec(r, 128, 1)
	for _, c := range []struct {
		name string
		f    func()
	}{
		{"MatMul pool m=16", func() { p.MatMul(out, x, 16, w) }},
		{"MatMul nil m=1", func() { (*Pool)(nil).MatMul(out, x, 1, w) }},
		{"Attention pool", func() { p.Attention(ao, q, 4, 4, kv, pt, 40, opts, scratch) }},
		{"Attention nil", func() { (*Pool)(nil).Attention(ao, q, 4, 4, kv, pt, 40, opts, scratch) }},
		{"DecodeAttention split", func() { p.DecodeAttention(ao, q, 2, mx, at, tables, opts, scratch) }},
		{"RMSNorm", func() { RMSNorm(out, x, nw, 8, 128, 1e-5) }},
		{"Rope", func() { rope.Apply(q, 4, 4, pos) }},
		{"SiLUMul", func() { SiLUMul(out, out, x[:len(out)]) }},
		{"Softmax", func() { Softmax(out) }},
		{"WriteKV", func() { WriteKV(kv, q[:32], q[:32], 1, pt, 44) }},
		{"WriteKV mxfp8", func() { WriteKV(mx, q[:32], nil, 1, pt, 44) }},
		{"EmbeddingGather", func() { EmbeddingGather(out, w, []int32{1, 2}) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			impls(t, func(t *testing.T) {
				if a := testing.AllocsPerRun(20, c.f); a != 0 {
					t.Errorf("%v allocations per call", a)
				}
			})
		})
	}
}
