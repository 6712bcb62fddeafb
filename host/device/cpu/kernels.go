package cpu

import (
	"fmt"
	"unsafe"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/rotary"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// kernels adapts kernels/cpu to the device seam: it resolves device spans to
// bounds-checked host slices and calls the pure kernels.
type kernels struct {
	d    *Device
	arch archState
}

func (k *kernels) f32(b device.Buf) ([]float32, error) {
	if b.N == 0 {
		return nil, nil
	}
	raw, err := k.d.mem.bytes(b.Ptr, b.Bytes())
	if err != nil {
		return nil, err
	}
	if uintptr(unsafe.Pointer(&raw[0]))%4 != 0 {
		return nil, fmt.Errorf("cpu device: float32 span at %#x is misaligned", uintptr(b.Ptr))
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&raw[0])), b.N), nil
}

func (k *kernels) matrix(w device.Weight) (kcpu.Matrix, error) {
	raw, err := k.d.mem.bytes(w.Ptr, w.Bytes)
	if err != nil {
		return kcpu.Matrix{}, err
	}
	m := kcpu.Matrix{Type: kcpu.DType(w.Type), Rows: w.Rows, Cols: w.Cols, Data: raw}
	return m, m.Validate()
}

func (k *kernels) vector(w device.Weight) ([]float32, error) {
	if w.Type != device.F32 || w.Rows != 1 {
		return nil, fmt.Errorf("cpu device: vector weight must be f32 with one row, got %s %dx%d", w.Type, w.Rows, w.Cols)
	}
	return k.f32(device.Buf{Ptr: w.Ptr, N: w.Cols})
}

func need(name string, have, want int) error {
	if have < want {
		return fmt.Errorf("cpu device: %s holds %d floats, needs %d", name, have, want)
	}
	return nil
}

func (k *kernels) MatMul(out, x device.Buf, m int, w device.Weight) error {
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	xs, err := k.f32(x)
	if err != nil {
		return err
	}
	mat, err := k.matrix(w)
	if err != nil {
		return err
	}
	if err := need("matmul output", len(o), m*w.Rows); err != nil {
		return err
	}
	if err := need("matmul input", len(xs), m*w.Cols); err != nil {
		return err
	}
	return k.run(func() { k.d.pool.MatMul(o[:m*w.Rows], xs[:m*w.Cols], m, mat) })
}

func (k *kernels) AddBias(out device.Buf, bias device.Weight, m int) error {
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	b, err := k.vector(bias)
	if err != nil {
		return err
	}
	if err := need("bias output", len(o), m*len(b)); err != nil {
		return err
	}
	return k.run(func() { kcpu.AddBias(o[:m*len(b)], b, m) })
}

func (k *kernels) Add(out, a, b device.Buf) error {
	if a.N != out.N || b.N != out.N {
		return fmt.Errorf("cpu device: add of %d, %d into %d floats", a.N, b.N, out.N)
	}
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	as, err := k.f32(a)
	if err != nil {
		return err
	}
	bs, err := k.f32(b)
	if err != nil {
		return err
	}
	return k.run(func() { kcpu.Add(o, as, bs) })
}

func (k *kernels) RMSNorm(out, x device.Buf, weight device.Weight, rows, dim int, eps float32) error {
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	xs, err := k.f32(x)
	if err != nil {
		return err
	}
	w, err := k.vector(weight)
	if err != nil {
		return err
	}
	if len(w) != dim {
		return fmt.Errorf("cpu device: rmsnorm weight has %d values for dim %d", len(w), dim)
	}
	if err := need("rmsnorm output", len(o), rows*dim); err != nil {
		return err
	}
	if err := need("rmsnorm input", len(xs), rows*dim); err != nil {
		return err
	}
	return k.run(func() { kcpu.RMSNorm(o[:rows*dim], xs[:rows*dim], w, rows, dim, eps) })
}

func (k *kernels) SiLUMul(out, gate, up device.Buf) error {
	if gate.N != out.N || up.N != out.N {
		return fmt.Errorf("cpu device: silu-mul of %d, %d into %d floats", gate.N, up.N, out.N)
	}
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	g, err := k.f32(gate)
	if err != nil {
		return err
	}
	u, err := k.f32(up)
	if err != nil {
		return err
	}
	return k.run(func() { kcpu.SiLUMul(o, g, u) })
}

type rope struct {
	spec device.RopeSpec
	r    *kcpu.Rope
}

func (r *rope) Spec() device.RopeSpec { return r.spec }

func (k *kernels) NewRope(s device.RopeSpec) (device.Rope, error) {
	r, err := rotary.Table(s)
	if err != nil {
		return nil, err
	}
	return &rope{spec: s, r: r}, nil
}

func (k *kernels) ApplyRope(r device.Rope, x device.Buf, n, heads int, positions []int32) error {
	rp, ok := r.(*rope)
	if !ok {
		return fmt.Errorf("cpu device: rope from another device")
	}
	xs, err := k.f32(x)
	if err != nil {
		return err
	}
	if err := need("rope input", len(xs), n*heads*rp.spec.HeadDim); err != nil {
		return err
	}
	if len(positions) < n {
		return fmt.Errorf("cpu device: rope has %d positions for %d rows", len(positions), n)
	}
	return k.run(func() { rp.r.Apply(xs[:n*heads*rp.spec.HeadDim], n, heads, positions[:n]) })
}

func (k *kernels) Embedding(out device.Buf, table device.Weight, ids []int32) error {
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	t, err := k.matrix(table)
	if err != nil {
		return err
	}
	if err := need("embedding output", len(o), len(ids)*table.Cols); err != nil {
		return err
	}
	for _, id := range ids {
		if id < 0 || int(id) >= table.Rows {
			return fmt.Errorf("cpu device: token id %d outside the embedding table of %d rows", id, table.Rows)
		}
	}
	return k.run(func() { kcpu.EmbeddingGather(o[:len(ids)*table.Cols], t, ids) })
}

// paged resolves a layer's cache to host views. The kernels store F32 rows
// with equal K and V head dims; other encodings and shapes are refused.
func (k *kernels) paged(kv device.KVLayer) (kcpu.PagedKV, error) {
	if err := kv.Validate(); err != nil {
		return kcpu.PagedKV{}, fmt.Errorf("cpu device: %w", err)
	}
	if kv.DType != device.KVF32 || kv.VInK || kv.VHeadDim != kv.HeadDim {
		return kcpu.PagedKV{}, fmt.Errorf("cpu device: %s kv cache with head dims %d/%d (latent %v) is not supported", kv.DType, kv.HeadDim, kv.VHeadDim, kv.VInK)
	}
	n := kv.Slots * kv.KRowElems()
	ks, err := k.f32(device.Buf{Ptr: kv.K.Ptr, N: n})
	if err != nil {
		return kcpu.PagedKV{}, err
	}
	vs, err := k.f32(device.Buf{Ptr: kv.V.Ptr, N: n})
	if err != nil {
		return kcpu.PagedKV{}, err
	}
	return kcpu.PagedKV{K: ks, V: vs, PageSize: kv.PageSize, KVHeads: kv.KVHeads, HeadDim: kv.HeadDim}, nil
}

// attnOpts refuses the options the kernels do not implement and returns
// the scale.
func attnOpts(o device.AttnOpts) (float32, error) {
	if o.Window != 0 || o.SoftCap != 0 || o.Sinks.Ptr != 0 {
		return 0, fmt.Errorf("cpu device: attention window %d, soft cap %v, sinks %v are not supported", o.Window, o.SoftCap, o.Sinks.Ptr != 0)
	}
	if !(o.Scale > 0) {
		return 0, fmt.Errorf("cpu device: attention scale %v must be positive", o.Scale)
	}
	return o.Scale, nil
}

// checkPages verifies every page a range of positions touches is inside the
// cache, so a corrupt page table is an error rather than a stray write.
func checkPages(kv device.KVLayer, pageTable []int32, endPos int) error {
	need := (endPos + kv.PageSize - 1) / kv.PageSize
	if need > len(pageTable) {
		return fmt.Errorf("cpu device: positions up to %d need %d pages, the table has %d", endPos, need, len(pageTable))
	}
	for _, p := range pageTable[:need] {
		if p < 0 || (int(p)+1)*kv.PageSize > kv.Slots {
			return fmt.Errorf("cpu device: page %d outside the KV cache of %d slots", p, kv.Slots)
		}
	}
	return nil
}

func (k *kernels) WriteKV(kv device.KVLayer, key, val device.Buf, n int, pageTable []int32, startPos int) error {
	if err := checkPages(kv, pageTable, startPos+n); err != nil {
		return err
	}
	p, err := k.paged(kv)
	if err != nil {
		return err
	}
	ks, err := k.f32(key)
	if err != nil {
		return err
	}
	vs, err := k.f32(val)
	if err != nil {
		return err
	}
	row := kv.KVHeads * kv.HeadDim
	if err := need("kv input", min(len(ks), len(vs)), n*row); err != nil {
		return err
	}
	return k.run(func() { kcpu.WriteKV(p, ks[:n*row], vs[:n*row], n, pageTable, startPos) })
}

// attentionBufs resolves the cache and the host views of an attention
// call's buffers (prefill and decode attention take the same four).
func (k *kernels) attentionBufs(kv device.KVLayer, out, q, scratch device.Buf) (p kcpu.PagedKV, o, qs, sc []float32, err error) {
	if p, err = k.paged(kv); err != nil {
		return
	}
	if o, err = k.f32(out); err != nil {
		return
	}
	if qs, err = k.f32(q); err != nil {
		return
	}
	sc, err = k.f32(scratch)
	return
}

func (k *kernels) AttentionScratch(n, startPos int) int {
	return kcpu.AttentionScratch(k.d.pool, n, startPos)
}

func (k *kernels) Attention(out, q device.Buf, n, heads int, kv device.KVLayer, pageTable []int32, startPos int, o device.AttnOpts, scratch device.Buf) error {
	scale, err := attnOpts(o)
	if err != nil {
		return err
	}
	if err := checkPages(kv, pageTable, startPos+n); err != nil {
		return err
	}
	if kv.KVHeads == 0 || heads%kv.KVHeads != 0 {
		return fmt.Errorf("cpu device: %d query heads do not group over %d KV heads", heads, kv.KVHeads)
	}
	p, os, qs, sc, err := k.attentionBufs(kv, out, q, scratch)
	if err != nil {
		return err
	}
	width := n * heads * kv.HeadDim
	if err := need("attention output", len(os), width); err != nil {
		return err
	}
	if err := need("attention query", len(qs), width); err != nil {
		return err
	}
	if err := need("attention scratch", len(sc), kcpu.AttentionScratch(k.d.pool, n, startPos)); err != nil {
		return err
	}
	return k.run(func() { k.d.pool.Attention(os[:width], qs[:width], n, heads, p, pageTable, startPos, scale, sc) })
}

func (k *kernels) GatherRows(out, x device.Buf, dim int, idx []int32) error {
	o, err := k.f32(out)
	if err != nil {
		return err
	}
	xs, err := k.f32(x)
	if err != nil {
		return err
	}
	if err := need("gather output", len(o), len(idx)*dim); err != nil {
		return err
	}
	for _, r := range idx {
		if r < 0 || (int(r)+1)*dim > len(xs) {
			return fmt.Errorf("cpu device: gather row %d outside %d rows", r, len(xs)/dim)
		}
	}
	return k.run(func() { gatherRows(o, xs, dim, idx) })
}

func (k *kernels) CopyToHost(dst []float32, src device.Buf) error {
	s, err := k.f32(src)
	if err != nil {
		return err
	}
	if len(dst) < len(s) {
		return fmt.Errorf("cpu device: copy of %d floats into %d", len(s), len(dst))
	}
	return k.run(func() { copy(dst, s) })
}

func (k *kernels) CopyFromHost(dst device.Buf, src []float32) error {
	d, err := k.f32(dst)
	if err != nil {
		return err
	}
	if len(d) < len(src) {
		return fmt.Errorf("cpu device: copy of %d floats into %d", len(src), len(d))
	}
	copy(d, src)
	return nil
}

func (k *kernels) Upload(p device.Ptr, src []byte) error {
	d, err := k.d.mem.bytes(p, int64(len(src)))
	if err != nil {
		return err
	}
	copy(d, src)
	return nil
}

func gatherRows(o, xs []float32, dim int, idx []int32) {
	for j, r := range idx {
		copy(o[j*dim:(j+1)*dim], xs[int(r)*dim:(int(r)+1)*dim])
	}
}
