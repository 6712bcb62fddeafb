//go:build cuda

package cuda

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/rotary"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// kernels implements device.Kernels by launching kernels/cuda on the
// device's stream. Calls are asynchronous; errors of a kernel's execution
// surface at the next synchronising call (CopyToHost).
type kernels struct{ d *Device }

// CublasMinM is the row count from which a GEMM goes to cuBLAS (when it is
// loaded and the weight is f32, f16 or bf16); below it matvec reads each
// weight once, which is what decode wants. Quantized weights always take
// matvec_q.
const CublasMinM = 16

func need(name string, have, want int) error {
	if have < want {
		return fmt.Errorf("cuda device: %s holds %d floats, needs %d", name, have, want)
	}
	return nil
}

func rowBytes(w device.Weight) (int, error) {
	rb, err := kcpu.DType(w.Type).RowBytes(w.Cols)
	if err != nil {
		return 0, fmt.Errorf("cuda device: weight %s %dx%d: %w", w.Type, w.Rows, w.Cols, err)
	}
	if int64(rb)*int64(w.Rows) != w.Bytes {
		return 0, fmt.Errorf("cuda device: weight %s %dx%d holds %d bytes, needs %d", w.Type, w.Rows, w.Cols, w.Bytes, int64(rb)*int64(w.Rows))
	}
	return rb, nil
}

func vector(w device.Weight) error {
	if w.Type != device.F32 || w.Rows != 1 {
		return fmt.Errorf("cuda device: vector weight must be f32 with one row, got %s %dx%d", w.Type, w.Rows, w.Cols)
	}
	return nil
}

func (k *kernels) MatMul(out, x device.Buf, m int, w device.Weight) error {
	rb, err := rowBytes(w)
	if err != nil {
		return err
	}
	if err := need("matmul output", out.N, m*w.Rows); err != nil {
		return err
	}
	if err := need("matmul input", x.N, m*w.Cols); err != nil {
		return err
	}
	if m == 0 {
		return nil
	}
	d := k.d
	return d.do(func() error {
		if m >= CublasMinM && d.blas != nil && !w.Type.Quantized() {
			return d.gemm(out, x, m, w)
		}
		dims, err := matvecDims(m, w.Rows)
		if err != nil {
			return err
		}
		// Quantized weights (cuBLAS takes none) are decoded on the fly
		// by matvec_q, at every m.
		kernel := "matvec"
		if w.Type.Quantized() {
			kernel = "matvec_q"
		}
		return d.launch(kernel, dims, ptrArg(out.Ptr), ptrArg(x.Ptr), ptrArg(w.Ptr),
			i32Arg(m), i32Arg(w.Rows), i32Arg(w.Cols), i64Arg(int64(rb)), i32Arg(int(w.Type)))
	})
}

// gemm runs cuBLAS GemmEx; f16/bf16 weights get x converted to the same
// type first (GemmEx wants A and B alike), accumulation stays f32.
func (d *Device) gemm(out, x device.Buf, m int, w device.Weight) error {
	xp, xType, wType := uintptr(x.Ptr), cudaR32F, cudaR32F
	if w.Type == device.F16 || w.Type == device.BF16 {
		n := m * w.Cols
		h, err := d.scratchHalf(int64(2 * n))
		if err != nil {
			return err
		}
		conv, t := "f32_to_f16", cudaR16F
		if w.Type == device.BF16 {
			conv, t = "f32_to_bf16", cudaR16BF
		}
		if err := d.launch(conv, elementwise(n), uint64(h), ptrArg(x.Ptr), i64Arg(int64(n))); err != nil {
			return err
		}
		xp, xType, wType = h, t, t
	}
	if d.mode == modeRecord {
		d.rec.ops = append(d.rec.ops, op{kind: opGemm, gemm: gemmArgs{out: uintptr(out.Ptr), x: xp, xType: xType, w: uintptr(w.Ptr), wType: wType, m: m, n: w.Rows, k: w.Cols}})
	}
	return d.blas.gemmRowMajor(uintptr(out.Ptr), xp, xType, uintptr(w.Ptr), wType, m, w.Rows, w.Cols)
}

func (k *kernels) AddBias(out device.Buf, bias device.Weight, m int) error {
	if err := vector(bias); err != nil {
		return err
	}
	if err := need("bias output", out.N, m*bias.Cols); err != nil {
		return err
	}
	if m == 0 || bias.Cols == 0 {
		return nil
	}
	return k.d.do(func() error {
		return k.d.launch("add_bias_f32", elementwise(m*bias.Cols), ptrArg(out.Ptr), ptrArg(bias.Ptr), i64Arg(int64(m)), i32Arg(bias.Cols))
	})
}

func (k *kernels) Add(out, a, b device.Buf) error {
	if a.N != out.N || b.N != out.N {
		return fmt.Errorf("cuda device: add of %d, %d into %d floats", a.N, b.N, out.N)
	}
	if out.N == 0 {
		return nil
	}
	return k.d.do(func() error {
		return k.d.launch("add_f32", elementwise(out.N), ptrArg(out.Ptr), ptrArg(a.Ptr), ptrArg(b.Ptr), i64Arg(int64(out.N)))
	})
}

func (k *kernels) RMSNorm(out, x device.Buf, weight device.Weight, rows, dim int, eps float32) error {
	if err := vector(weight); err != nil {
		return err
	}
	if weight.Cols != dim {
		return fmt.Errorf("cuda device: rmsnorm weight has %d values for dim %d", weight.Cols, dim)
	}
	if err := need("rmsnorm output", out.N, rows*dim); err != nil {
		return err
	}
	if err := need("rmsnorm input", x.N, rows*dim); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	return k.d.do(func() error {
		return k.d.launch("rmsnorm_f32", perRow(rows, dim), ptrArg(out.Ptr), ptrArg(x.Ptr), ptrArg(weight.Ptr), i32Arg(dim), f32Arg(eps))
	})
}

func (k *kernels) SiLUMul(out, gate, up device.Buf) error {
	if gate.N != out.N || up.N != out.N {
		return fmt.Errorf("cuda device: silu-mul of %d, %d into %d floats", gate.N, up.N, out.N)
	}
	if out.N == 0 {
		return nil
	}
	return k.d.do(func() error {
		return k.d.launch("silu_mul_f32", elementwise(out.N), ptrArg(out.Ptr), ptrArg(gate.Ptr), ptrArg(up.Ptr), i64Arg(int64(out.N)))
	})
}

// rope keeps the scaled inverse frequencies on the host (float64, exactly
// the CPU kernel's) and uploads them with each application through the
// staging ring, so the table's address is fixed per step for graphs.
type rope struct {
	spec       device.RopeSpec
	invFreq    []float64
	attnFactor float64
}

func (r *rope) Spec() device.RopeSpec { return r.spec }

func (k *kernels) NewRope(s device.RopeSpec) (device.Rope, error) {
	r, err := rotary.Table(s)
	if err != nil {
		return nil, err
	}
	return &rope{spec: s, invFreq: r.InvFreq(), attnFactor: r.AttnFactor()}, nil
}

func (k *kernels) ApplyRope(r device.Rope, x device.Buf, n, heads int, positions []int32) error {
	rp, ok := r.(*rope)
	if !ok {
		return fmt.Errorf("cuda device: rope from another device")
	}
	s := rp.spec
	if err := need("rope input", x.N, n*heads*s.HeadDim); err != nil {
		return err
	}
	if len(positions) < n {
		return fmt.Errorf("cuda device: rope has %d positions for %d rows", len(positions), n)
	}
	if n == 0 {
		return nil
	}
	d := k.d
	return d.do(func() error {
		pos, err := d.stageInts(positions[:n])
		if err != nil {
			return err
		}
		inv, err := d.stageDoubles(rp.invFreq)
		if err != nil {
			return err
		}
		neox := 0
		if s.Neox {
			neox = 1
		}
		return d.launch("rope_f32", perRow(n, heads*s.RotDim/2), ptrArg(x.Ptr), uint64(pos), uint64(inv),
			i32Arg(heads), i32Arg(s.HeadDim), i32Arg(s.RotDim), i32Arg(neox), i32Arg(s.RotOffset), f64Arg(rp.attnFactor))
	})
}

func (k *kernels) Embedding(out device.Buf, table device.Weight, ids []int32) error {
	rb, err := rowBytes(table)
	if err != nil {
		return err
	}
	if err := need("embedding output", out.N, len(ids)*table.Cols); err != nil {
		return err
	}
	for _, id := range ids {
		if id < 0 || int(id) >= table.Rows {
			return fmt.Errorf("cuda device: token id %d outside the embedding table of %d rows", id, table.Rows)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	d := k.d
	return d.do(func() error {
		p, err := d.stageIDs(ids, table.Rows)
		if err != nil {
			return err
		}
		return d.launch("embedding", perRow(len(ids), table.Cols), ptrArg(out.Ptr), ptrArg(table.Ptr), uint64(p),
			i32Arg(table.Cols), i64Arg(int64(rb)), i32Arg(int(table.Type)))
	})
}

// checkPages verifies every page positions [from, end) touch is inside the
// cache: an out-of-range slot would be an illegal address, which kills the
// context. Pages wholly before from (released behind a sliding window) are
// not looked at; the kernels never read them.
func checkPages(kv device.KVLayer, pageTable []int32, from, end int) (int, error) {
	if err := checkKV(kv); err != nil {
		return 0, err
	}
	need := (end + kv.PageSize - 1) / kv.PageSize
	if need > len(pageTable) {
		return 0, fmt.Errorf("cuda device: positions up to %d need %d pages, the table has %d", end, need, len(pageTable))
	}
	for _, p := range pageTable[min(from/kv.PageSize, need):need] {
		if p < 0 || (int(p)+1)*kv.PageSize > kv.Slots {
			return 0, fmt.Errorf("cuda device: page %d outside the KV cache of %d slots", p, kv.Slots)
		}
	}
	return need, nil
}

// windowStart is the first position a query at pos reads.
func windowStart(pos, window int) int {
	if window > 0 {
		return max(0, pos-window+1)
	}
	return 0
}

// kvArgs are a layer's cache spans and encoding as the KV kernels take them.
func kvArgs(kv device.KVLayer) []uint64 {
	vink := 0
	if kv.VInK {
		vink = 1
	}
	return []uint64{ptrArg(kv.K.Ptr), ptrArg(kv.V.Ptr), ptrArg(kv.KScale.Ptr), ptrArg(kv.VScale.Ptr), i32Arg(int(kv.DType)), i32Arg(vink)}
}

// kvThreads is the block size of a KV write: a thread per element, or per
// scale block for the block-scaled encodings.
func kvThreads(kv device.KVLayer) int {
	units := max(kv.KRowElems(), kv.VRowElems())
	if b := kv.DType.ScaleBlock(); b > 0 {
		units /= b
	}
	return units
}

func (k *kernels) WriteKV(kv device.KVLayer, key, val device.Buf, n int, pageTable []int32, startPos int) error {
	if n < 0 || startPos < 0 {
		return fmt.Errorf("cuda device: kv write of %d rows at %d", n, startPos)
	}
	pages, err := checkPages(kv, pageTable, startPos, startPos+n)
	if err != nil {
		return err
	}
	if err := kvInputs(kv, key, val, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	d := k.d
	a := kvArgs(kv)
	return d.do(func() error {
		meta, err := d.stageMeta(startPos, pageTable[:pages])
		if err != nil {
			return err
		}
		return d.launch("write_kv", perRow(n, kvThreads(kv)), a[0], a[1], a[2], a[3], ptrArg(key.Ptr), ptrArg(val.Ptr),
			uint64(meta), i32Arg(kv.PageSize), i32Arg(kv.KRowElems()), i32Arg(kv.VRowElems()), a[4], a[5])
	})
}

// kvInputs checks the k and v rows a KV write encodes (v is not read for a
// latent layer).
func kvInputs(kv device.KVLayer, key, val device.Buf, rows int) error {
	if err := need("kv key input", key.N, rows*kv.KRowElems()); err != nil || kv.VInK {
		return err
	}
	return need("kv value input", val.N, rows*kv.VRowElems())
}

// checkKV validates a layer and that the kernels take its shape.
func checkKV(kv device.KVLayer) error {
	if err := kv.Validate(); err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	if kv.HeadDim > attnMaxHeadDim || kv.VHeadDim > attnMaxVDim {
		return fmt.Errorf("cuda device: kv head dims %d/%d exceed the kernels' %d/%d", kv.HeadDim, kv.VHeadDim, attnMaxHeadDim, attnMaxVDim)
	}
	return nil
}

// attnArgs checks an attention call's options and returns its sinks pointer
// (0: none) and the scalar arguments the kernels take after the shapes.
func attnArgs(o device.AttnOpts, heads int) (sinks uint64, tail []uint64, err error) {
	if !(o.Scale > 0) || o.Window < 0 || o.SoftCap < 0 || o.SoftCap != o.SoftCap {
		return 0, nil, fmt.Errorf("cuda device: attention scale %v must be positive, window %d and soft cap %v not negative", o.Scale, o.Window, o.SoftCap)
	}
	if o.Sinks.Ptr != 0 {
		if o.Sinks.Type != device.F32 || o.Sinks.Rows != 1 || o.Sinks.Cols != heads {
			return 0, nil, fmt.Errorf("cuda device: attention sinks must be f32 with one row of %d logits, got %s %dx%d", heads, o.Sinks.Type, o.Sinks.Rows, o.Sinks.Cols)
		}
	}
	return ptrArg(o.Sinks.Ptr), []uint64{f32Arg(o.Scale), i32Arg(o.Window), f32Arg(o.SoftCap)}, nil
}

// AttentionScratch is 1: the kernels keep their scores in shared memory.
func (k *kernels) AttentionScratch(device.AttnShape) int { return 1 }

func (k *kernels) Attention(out, q device.Buf, n, heads int, kv device.KVLayer, pageTable []int32, startPos int, o device.AttnOpts, scratch device.Buf) error {
	sinks, tail, err := attnArgs(o, heads)
	if err != nil {
		return err
	}
	if n < 0 || startPos < 0 {
		return fmt.Errorf("cuda device: attention of %d rows at %d", n, startPos)
	}
	pages, err := checkPages(kv, pageTable, windowStart(startPos, o.Window), startPos+n)
	if err != nil {
		return err
	}
	if heads <= 0 || heads%kv.KVHeads != 0 {
		return fmt.Errorf("cuda device: %d query heads do not group over %d KV heads", heads, kv.KVHeads)
	}
	if err := need("attention output", out.N, n*heads*kv.VHeadDim); err != nil {
		return err
	}
	if err := need("attention query", q.N, n*heads*kv.HeadDim); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	dims, err := attentionDims(n, heads, kv.HeadDim, kv.VHeadDim)
	if err != nil {
		return err
	}
	d := k.d
	a := kvArgs(kv)
	return d.do(func() error {
		meta, err := d.stageMeta(startPos, pageTable[:pages])
		if err != nil {
			return err
		}
		return d.launch("attention", dims, ptrArg(out.Ptr), ptrArg(q.Ptr), a[0], a[1], a[2], a[3], sinks, uint64(meta),
			i32Arg(heads), i32Arg(kv.KVHeads), i32Arg(kv.HeadDim), i32Arg(kv.VHeadDim), i32Arg(kv.PageSize), a[4], a[5],
			tail[0], tail[1], tail[2])
	})
}

func (k *kernels) GatherRows(out, x device.Buf, dim int, idx []int32) error {
	if err := need("gather output", out.N, len(idx)*dim); err != nil {
		return err
	}
	for _, r := range idx {
		if r < 0 || (int(r)+1)*dim > x.N {
			return fmt.Errorf("cuda device: gather row %d outside %d rows", r, x.N/max(dim, 1))
		}
	}
	if len(idx) == 0 || dim == 0 {
		return nil
	}
	d := k.d
	return d.do(func() error {
		p, err := d.stageInts(idx)
		if err != nil {
			return err
		}
		return d.launch("gather_rows_f32", perRow(len(idx), dim), ptrArg(out.Ptr), ptrArg(x.Ptr), uint64(p), i32Arg(dim))
	})
}

// LogSoftmax writes log(softmax(row)) for rows×cols logits (out may alias x).
func (k *kernels) LogSoftmax(out, x device.Buf, rows, cols int) error {
	if err := need("log-softmax input", x.N, rows*cols); err != nil {
		return err
	}
	if err := need("log-softmax output", out.N, rows*cols); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return k.d.do(func() error {
		return k.d.launch("log_softmax_f32", perRow(rows, cols), ptrArg(out.Ptr), ptrArg(x.Ptr), i32Arg(cols))
	})
}

// Argmax writes the first index of each row's maximum (NaN never wins) to
// out, a device buffer of rows int32 values (a Buf of rows elements).
func (k *kernels) Argmax(out device.Buf, x device.Buf, rows, cols int) error {
	if err := need("argmax input", x.N, rows*cols); err != nil {
		return err
	}
	if err := need("argmax output", out.N, rows); err != nil {
		return err
	}
	if rows == 0 || cols == 0 {
		return nil
	}
	return k.d.do(func() error {
		return k.d.launch("argmax_f32", perRow(rows, cols), ptrArg(out.Ptr), ptrArg(x.Ptr), i32Arg(cols))
	})
}

// CopyToHost waits for the stream and copies src into dst. While a capture
// is open the copy is also recorded: the graph lands it in pinned memory and
// each launch delivers it to dst.
func (k *kernels) CopyToHost(dst []float32, src device.Buf) error {
	if len(dst) < src.N {
		return fmt.Errorf("cuda device: copy of %d floats into %d", src.N, len(dst))
	}
	if src.N == 0 {
		return nil
	}
	d := k.d
	n := int64(src.N) * 4
	return d.do(func() error {
		if err := dtohSync(unsafe.Pointer(&dst[0]), uintptr(src.Ptr), n, d.st); err != nil {
			return err
		}
		if d.mode != modeRecord {
			d.ring.reset()
			return nil
		}
		// The ring keeps the recording's spans: they are the graph's.
		r := d.rec
		r.ops = append(r.ops, op{kind: opDtoH, dev: uintptr(src.Ptr), n: n, off: r.outBytes})
		r.outs = append(r.outs, outBinding{off: r.outBytes, dst: dst[:src.N]})
		r.outBytes += (n + ringAlign - 1) / ringAlign * ringAlign
		return nil
	})
}

// CopyFromHost stages src through the pinned ring (or, eagerly and when
// large, copies it directly). While a capture is open src is bound: each
// graph launch copies its current contents.
func (k *kernels) CopyFromHost(dst device.Buf, src []float32) error {
	if dst.N < len(src) {
		return fmt.Errorf("cuda device: copy of %d floats into %d", len(src), dst.N)
	}
	if len(src) == 0 {
		return nil
	}
	d := k.d
	n := int64(4 * len(src))
	return d.do(func() error {
		if d.mode == modeEager && n > d.ring.size/4 {
			return htodSync(uintptr(dst.Ptr), unsafe.Pointer(&src[0]), n, d.st)
		}
		_, err := d.stage(n, func(b []byte) error {
			copy(b, unsafe.Slice((*byte)(unsafe.Pointer(&src[0])), n))
			return nil
		}, uintptr(dst.Ptr))
		return err
	})
}

func (k *kernels) Upload(p device.Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	d := k.d
	return d.do(func() error {
		if d.mode != modeEager {
			return fmt.Errorf("cuda device: upload during an open graph capture")
		}
		return htodSync(uintptr(p), unsafe.Pointer(&src[0]), int64(len(src)), d.st)
	})
}

// WriteKVRows stores row i of k and v at positions[i] of the sequence whose
// page table is tables[i]; positions and tables are staged (and, in a
// graph, re-read and re-checked at every launch).
func (k *kernels) WriteKVRows(kv device.KVLayer, key, val device.Buf, positions []int32, tables [][]int32) error {
	if len(tables) < len(positions) {
		return fmt.Errorf("cuda device: %d positions, %d page tables", len(positions), len(tables))
	}
	if err := checkKV(kv); err != nil {
		return err
	}
	rows := len(positions)
	if err := kvInputs(kv, key, val, rows); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	d := k.d
	a := kvArgs(kv)
	return d.do(func() error {
		// A write touches one page per row: window 1.
		meta, stride, err := d.stageDecode(kv, positions, tables, math.MaxInt32, 1)
		if err != nil {
			return err
		}
		return d.launch("write_kv_rows", perRow(rows, kvThreads(kv)), a[0], a[1], a[2], a[3], ptrArg(key.Ptr), ptrArg(val.Ptr),
			uint64(meta), i32Arg(rows), i32Arg(stride), i32Arg(kv.PageSize), i32Arg(kv.KRowElems()), i32Arg(kv.VRowElems()), a[4], a[5])
	})
}

// DecodeAttention: row i of q attends to positions 0..positions[i] of
// tables[i] (within opts.Window); every positions[i] must be below maxLen.
func (k *kernels) DecodeAttention(out, q device.Buf, heads int, kv device.KVLayer, positions []int32, tables [][]int32, opts device.AttnOpts, scratch device.Buf, maxLen int) error {
	if len(tables) < len(positions) {
		return fmt.Errorf("cuda device: %d positions, %d page tables", len(positions), len(tables))
	}
	sinks, tail, err := attnArgs(opts, heads)
	if err != nil {
		return err
	}
	if err := checkKV(kv); err != nil {
		return err
	}
	if heads <= 0 || heads%kv.KVHeads != 0 {
		return fmt.Errorf("cuda device: %d query heads do not group over %d KV heads", heads, kv.KVHeads)
	}
	rows := len(positions)
	if err := need("decode attention output", out.N, rows*heads*kv.VHeadDim); err != nil {
		return err
	}
	if err := need("decode attention query", q.N, rows*heads*kv.HeadDim); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	dims, err := attentionDims(rows, heads, kv.HeadDim, kv.VHeadDim)
	if err != nil {
		return err
	}
	d := k.d
	a := kvArgs(kv)
	return d.do(func() error {
		// The KV write of the same step staged these slices with another
		// geometry; stage again under maxLen and the window (a separate span).
		meta, stride, err := d.stageDecode(kv, positions, tables, maxLen, opts.Window)
		if err != nil {
			return err
		}
		return d.launch("decode_attention", dims, ptrArg(out.Ptr), ptrArg(q.Ptr), a[0], a[1], a[2], a[3], sinks, uint64(meta),
			i32Arg(rows), i32Arg(stride), i32Arg(heads), i32Arg(kv.KVHeads), i32Arg(kv.HeadDim), i32Arg(kv.VHeadDim),
			i32Arg(kv.PageSize), a[4], a[5], tail[0], tail[1], tail[2])
	})
}
