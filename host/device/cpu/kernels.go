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
	// mmOut and mmW hold one MatMuls call's resolved slices, so the eager
	// call allocates nothing.
	mmOut [kcpu.MatMulGroupMax][]float32
	mmW   [kcpu.MatMulGroupMax]kcpu.Matrix
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

// matMulArgs resolves one MatMul's output, input and weight spans.
func (k *kernels) matMulArgs(out, x device.Buf, m int, w device.Weight) (o, xs []float32, mat kcpu.Matrix, err error) {
	if o, err = k.f32(out); err != nil {
		return nil, nil, mat, err
	}
	if xs, err = k.f32(x); err != nil {
		return nil, nil, mat, err
	}
	if mat, err = k.matrix(w); err != nil {
		return nil, nil, mat, err
	}
	if err := need("matmul output", len(o), m*w.Rows); err != nil {
		return nil, nil, mat, err
	}
	if err := need("matmul input", len(xs), m*w.Cols); err != nil {
		return nil, nil, mat, err
	}
	return o[:m*w.Rows], xs[:m*w.Cols], mat, nil
}

func (k *kernels) MatMul(out, x device.Buf, m int, w device.Weight) error {
	o, xs, mat, err := k.matMulArgs(out, x, m, w)
	if err != nil {
		return err
	}
	if k.d.capturing {
		return k.record(func() { k.d.pool.MatMul(o, xs, m, mat) })
	}
	k.d.pool.MatMul(o, xs, m, mat)
	return nil
}

func (k *kernels) MatMuls(outs []device.Buf, x device.Buf, m int, ws []device.Weight) error {
	if len(outs) != len(ws) || len(ws) > kcpu.MatMulGroupMax {
		return fmt.Errorf("cpu device: matmuls of %d outputs and %d weights (at most %d)", len(outs), len(ws), kcpu.MatMulGroupMax)
	}
	n := len(ws)
	var xs []float32
	for i, w := range ws {
		o, xi, mat, err := k.matMulArgs(outs[i], x, m, w)
		if err != nil {
			return fmt.Errorf("cpu device: matmuls weight %d: %w", i, err)
		}
		k.mmOut[i], k.mmW[i] = o, mat
		if len(xi) > len(xs) {
			xs = xi
		}
	}
	if k.d.capturing {
		// The graph keeps its own copies of the slices.
		oc, wc := k.mmOut, k.mmW
		return k.record(func() { k.d.pool.MatMuls(oc[:n], xs, m, wc[:n]) })
	}
	k.d.pool.MatMuls(k.mmOut[:n], xs, m, k.mmW[:n])
	k.mmOut, k.mmW = [kcpu.MatMulGroupMax][]float32{}, [kcpu.MatMulGroupMax]kcpu.Matrix{}
	return nil
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
	if k.d.capturing {
		return k.record(func() { kcpu.AddBias(o[:m*len(b)], b, m) })
	}
	kcpu.AddBias(o[:m*len(b)], b, m)
	return nil
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
	if k.d.capturing {
		return k.record(func() { kcpu.Add(o, as, bs) })
	}
	kcpu.Add(o, as, bs)
	return nil
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
	if k.d.capturing {
		return k.record(func() { kcpu.RMSNorm(o[:rows*dim], xs[:rows*dim], w, rows, dim, eps) })
	}
	kcpu.RMSNorm(o[:rows*dim], xs[:rows*dim], w, rows, dim, eps)
	return nil
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
	if k.d.capturing {
		return k.record(func() { kcpu.SiLUMul(o, g, u) })
	}
	kcpu.SiLUMul(o, g, u)
	return nil
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
	if k.d.capturing {
		return k.record(func() { rp.r.Apply(xs[:n*heads*rp.spec.HeadDim], n, heads, positions[:n]) })
	}
	rp.r.Apply(xs[:n*heads*rp.spec.HeadDim], n, heads, positions[:n])
	return nil
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
	if k.d.capturing {
		return k.record(func() { kcpu.EmbeddingGather(o[:len(ids)*table.Cols], t, ids) })
	}
	kcpu.EmbeddingGather(o[:len(ids)*table.Cols], t, ids)
	return nil
}

// paged resolves a layer's cache to host views of its spans, in any
// encoding the kernels implement (all of device.KVDType).
func (k *kernels) paged(kv device.KVLayer) (kcpu.PagedKV, error) {
	if err := kv.Validate(); err != nil {
		return kcpu.PagedKV{}, fmt.Errorf("cpu device: %w", err)
	}
	t := kcpu.KVType(kv.DType)
	p := kcpu.PagedKV{Type: t, PageSize: kv.PageSize, KVHeads: kv.KVHeads, HeadDim: kv.HeadDim, VHeadDim: kv.VHeadDim, VInK: kv.VInK}
	span := func(s device.Span, rowBytes int) ([]byte, error) {
		if rowBytes == 0 {
			return nil, nil
		}
		return k.d.mem.bytes(s.Ptr, int64(kv.Slots)*int64(rowBytes))
	}
	var err error
	if p.K, err = span(kv.K, t.RowBytes(kv.KRowElems())); err != nil {
		return p, err
	}
	if p.KScale, err = span(kv.KScale, t.ScaleBytes(kv.KRowElems())); err != nil {
		return p, err
	}
	if !kv.VInK {
		if p.V, err = span(kv.V, t.RowBytes(kv.VRowElems())); err != nil {
			return p, err
		}
		if p.VScale, err = span(kv.VScale, t.ScaleBytes(kv.VRowElems())); err != nil {
			return p, err
		}
	}
	return p, p.Validate()
}

// attnOpts checks an attention call's options and resolves its sinks.
func (k *kernels) attnOpts(o device.AttnOpts, heads int) (kcpu.AttnOpts, error) {
	if !(o.Scale > 0) || o.Window < 0 || o.SoftCap < 0 || o.SoftCap != o.SoftCap {
		return kcpu.AttnOpts{}, fmt.Errorf("cpu device: attention scale %v must be positive, window %d and soft cap %v not negative", o.Scale, o.Window, o.SoftCap)
	}
	ko := kcpu.AttnOpts{Scale: o.Scale, Window: o.Window, SoftCap: o.SoftCap}
	if o.Sinks.Ptr != 0 {
		s, err := k.vector(o.Sinks)
		if err != nil {
			return ko, fmt.Errorf("cpu device: attention sinks: %w", err)
		}
		if len(s) != heads {
			return ko, fmt.Errorf("cpu device: attention sinks hold %d logits for %d query heads", len(s), heads)
		}
		ko.Sinks = s
	}
	return ko, nil
}

// windowStart is the first position a query at pos reads.
func windowStart(pos, window int) int {
	if window > 0 {
		return max(0, pos-window+1)
	}
	return 0
}

// checkPages verifies every page that positions [from, end) touch is inside
// the cache, so a corrupt page table is an error rather than a stray access.
// Pages wholly before from (released behind a sliding window) are not
// looked at.
func checkPages(kv device.KVLayer, pageTable []int32, from, end int) error {
	need := (end + kv.PageSize - 1) / kv.PageSize
	if need > len(pageTable) {
		return fmt.Errorf("cpu device: positions up to %d need %d pages, the table has %d", end, need, len(pageTable))
	}
	for _, p := range pageTable[min(from/kv.PageSize, need):need] {
		if p < 0 || (int(p)+1)*kv.PageSize > kv.Slots {
			return fmt.Errorf("cpu device: page %d outside the KV cache of %d slots", p, kv.Slots)
		}
	}
	return nil
}

// kvInputs resolves the k and v rows a KV write encodes (v is not read for
// a latent layer).
func (k *kernels) kvInputs(kv device.KVLayer, key, val device.Buf, rows int) (ks, vs []float32, err error) {
	if ks, err = k.f32(key); err != nil {
		return
	}
	if err = need("kv key input", len(ks), rows*kv.KRowElems()); err != nil || kv.VInK {
		return
	}
	if vs, err = k.f32(val); err != nil {
		return
	}
	err = need("kv value input", len(vs), rows*kv.VRowElems())
	return
}

func (k *kernels) WriteKV(kv device.KVLayer, key, val device.Buf, n int, pageTable []int32, startPos int) error {
	p, err := k.paged(kv)
	if err != nil {
		return err
	}
	if n < 0 || startPos < 0 {
		return fmt.Errorf("cpu device: kv write of %d rows at %d", n, startPos)
	}
	if err := checkPages(kv, pageTable, startPos, startPos+n); err != nil {
		return err
	}
	ks, vs, err := k.kvInputs(kv, key, val, n)
	if err != nil {
		return err
	}
	if k.d.capturing {
		pc := p // only a recorded launch keeps the cache view (it is too large to capture by value)
		return k.record(func() { kcpu.WriteKV(pc, ks, vs, n, pageTable, startPos) })
	}
	kcpu.WriteKV(p, ks, vs, n, pageTable, startPos)
	return nil
}

// attentionBufs resolves the cache, the options and the host views of an
// attention call's buffers (prefill and decode attention take the same
// ones) for rows query rows.
func (k *kernels) attentionBufs(kv device.KVLayer, heads, rows int, opts device.AttnOpts, out, q, scratch device.Buf) (p kcpu.PagedKV, ko kcpu.AttnOpts, o, qs, sc []float32, err error) {
	if p, err = k.paged(kv); err != nil {
		return
	}
	if heads <= 0 || heads%kv.KVHeads != 0 {
		err = fmt.Errorf("cpu device: %d query heads do not group over %d KV heads", heads, kv.KVHeads)
		return
	}
	if ko, err = k.attnOpts(opts, heads); err != nil {
		return
	}
	if o, err = k.f32(out); err != nil {
		return
	}
	if qs, err = k.f32(q); err != nil {
		return
	}
	if sc, err = k.f32(scratch); err != nil {
		return
	}
	if err = need("attention output", len(o), rows*heads*kv.VHeadDim); err != nil {
		return
	}
	if err = need("attention query", len(qs), rows*heads*kv.HeadDim); err != nil {
		return
	}
	err = need("attention scratch", len(sc), kcpu.AttentionScratch(k.d.pool.Threads(), kv.HeadDim, kv.VHeadDim))
	return
}

// AttentionScratch is the kernels' figure for the pool's workers: a few
// tiles each, independent of context and batch.
func (k *kernels) AttentionScratch(s device.AttnShape) int {
	return kcpu.AttentionScratch(k.d.pool.Threads(), s.HeadDim, s.VHeadDim)
}

func (k *kernels) Attention(out, q device.Buf, n, heads int, kv device.KVLayer, pageTable []int32, startPos int, o device.AttnOpts, scratch device.Buf) error {
	p, ko, os, qs, sc, err := k.attentionBufs(kv, heads, n, o, out, q, scratch)
	if err != nil {
		return err
	}
	if n < 0 || startPos < 0 {
		return fmt.Errorf("cpu device: attention of %d rows at %d", n, startPos)
	}
	if err := checkPages(kv, pageTable, windowStart(startPos, o.Window), startPos+n); err != nil {
		return err
	}
	if k.d.capturing {
		pc, kc := p, ko
		return k.record(func() { k.d.pool.Attention(os, qs, n, heads, pc, pageTable, startPos, kc, sc) })
	}
	k.d.pool.Attention(os, qs, n, heads, p, pageTable, startPos, ko, sc)
	return nil
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
	if k.d.capturing {
		return k.record(func() { gatherRows(o, xs, dim, idx) })
	}
	gatherRows(o, xs, dim, idx)
	return nil
}

func (k *kernels) CopyToHost(dst []float32, src device.Buf) error {
	s, err := k.f32(src)
	if err != nil {
		return err
	}
	if len(dst) < len(s) {
		return fmt.Errorf("cpu device: copy of %d floats into %d", len(s), len(dst))
	}
	if k.d.capturing {
		return k.record(func() { copy(dst, s) })
	}
	copy(dst, s)
	return nil
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
	d, err := k.d.mem.writable(p, int64(len(src)))
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
