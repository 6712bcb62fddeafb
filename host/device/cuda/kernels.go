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
// weight once, which is what decode wants.
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
		if m >= CublasMinM && d.blas != nil && w.Type != device.Q8_0 {
			return d.gemm(out, x, m, w)
		}
		dims, err := matvecDims(m, w.Rows)
		if err != nil {
			return err
		}
		return d.launch("matvec", dims, ptrArg(out.Ptr), ptrArg(x.Ptr), ptrArg(w.Ptr),
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

// checkPages verifies every page a range of positions touches is inside the
// cache: an out-of-range slot would be an illegal address, which kills the
// context.
func checkPages(kv device.KVLayer, pageTable []int32, endPos int) (int, error) {
	if err := checkKV(kv); err != nil {
		return 0, err
	}
	slots := kv.Slots
	need := (endPos + kv.PageSize - 1) / kv.PageSize
	if need > len(pageTable) {
		return 0, fmt.Errorf("cuda device: positions up to %d need %d pages, the table has %d", endPos, need, len(pageTable))
	}
	for _, p := range pageTable[:need] {
		if p < 0 || (int(p)+1)*kv.PageSize > slots {
			return 0, fmt.Errorf("cuda device: page %d outside the KV cache of %d slots", p, slots)
		}
	}
	return need, nil
}

func (k *kernels) WriteKV(kv device.KVLayer, key, val device.Buf, n int, pageTable []int32, startPos int) error {
	pages, err := checkPages(kv, pageTable, startPos+n)
	if err != nil {
		return err
	}
	row := kv.KVHeads * kv.HeadDim
	if err := need("kv input", min(key.N, val.N), n*row); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	d := k.d
	return d.do(func() error {
		meta, err := d.stageMeta(startPos, pageTable[:pages])
		if err != nil {
			return err
		}
		return d.launch("write_kv_f32", perRow(n, row), ptrArg(kv.K.Ptr), ptrArg(kv.V.Ptr), ptrArg(key.Ptr), ptrArg(val.Ptr),
			uint64(meta), i32Arg(kv.PageSize), i32Arg(row))
	})
}

// checkKV refuses the caches the kernels do not implement: they store F32
// rows with equal K and V head dims.
func checkKV(kv device.KVLayer) error {
	if err := kv.Validate(); err != nil {
		return fmt.Errorf("cuda device: %w", err)
	}
	if kv.DType != device.KVF32 || kv.VInK || kv.VHeadDim != kv.HeadDim {
		return fmt.Errorf("cuda device: %s kv cache with head dims %d/%d (latent %v) is not supported", kv.DType, kv.HeadDim, kv.VHeadDim, kv.VInK)
	}
	return nil
}

// attnScale refuses the attention options the kernels do not implement and
// returns the scale.
func attnScale(o device.AttnOpts) (float32, error) {
	if o.Window != 0 || o.SoftCap != 0 || o.Sinks.Ptr != 0 {
		return 0, fmt.Errorf("cuda device: attention window %d, soft cap %v, sinks %v are not supported", o.Window, o.SoftCap, o.Sinks.Ptr != 0)
	}
	if !(o.Scale > 0) {
		return 0, fmt.Errorf("cuda device: attention scale %v must be positive", o.Scale)
	}
	return o.Scale, nil
}

// AttentionScratch is 1: the kernel keeps its scores in shared memory.
func (k *kernels) AttentionScratch(n, startPos int) int { return 1 }

func (k *kernels) Attention(out, q device.Buf, n, heads int, kv device.KVLayer, pageTable []int32, startPos int, o device.AttnOpts, scratch device.Buf) error {
	scale, err := attnScale(o)
	if err != nil {
		return err
	}
	pages, err := checkPages(kv, pageTable, startPos+n)
	if err != nil {
		return err
	}
	if heads <= 0 || heads%kv.KVHeads != 0 {
		return fmt.Errorf("cuda device: %d query heads do not group over %d KV heads", heads, kv.KVHeads)
	}
	width := n * heads * kv.HeadDim
	if err := need("attention output", out.N, width); err != nil {
		return err
	}
	if err := need("attention query", q.N, width); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	dims, err := attentionDims(n, heads, kv.HeadDim)
	if err != nil {
		return err
	}
	d := k.d
	return d.do(func() error {
		meta, err := d.stageMeta(startPos, pageTable[:pages])
		if err != nil {
			return err
		}
		return d.launch("attention_f32", dims, ptrArg(out.Ptr), ptrArg(q.Ptr), ptrArg(kv.K.Ptr), ptrArg(kv.V.Ptr), uint64(meta),
			i32Arg(heads), i32Arg(kv.KVHeads), i32Arg(kv.HeadDim), i32Arg(kv.PageSize), f32Arg(scale))
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
	row := kv.KVHeads * kv.HeadDim
	rows := len(positions)
	if err := need("kv rows input", min(key.N, val.N), rows*row); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	d := k.d
	return d.do(func() error {
		meta, stride, err := d.stageDecode(kv, positions, tables, math.MaxInt32)
		if err != nil {
			return err
		}
		return d.launch("write_kv_rows_f32", perRow(rows, row), ptrArg(kv.K.Ptr), ptrArg(kv.V.Ptr), ptrArg(key.Ptr), ptrArg(val.Ptr),
			uint64(meta), i32Arg(rows), i32Arg(stride), i32Arg(kv.PageSize), i32Arg(row))
	})
}

// DecodeAttentionScratch is 1: the kernel keeps its scores in shared memory.
func (k *kernels) DecodeAttentionScratch(maxLen int) int { return 1 }

// DecodeAttention: row i of q attends to positions 0..positions[i] of
// tables[i]; every positions[i] must be below maxLen.
func (k *kernels) DecodeAttention(out, q device.Buf, heads int, kv device.KVLayer, positions []int32, tables [][]int32, opts device.AttnOpts, scratch device.Buf, maxLen int) error {
	if len(tables) < len(positions) {
		return fmt.Errorf("cuda device: %d positions, %d page tables", len(positions), len(tables))
	}
	scale, err := attnScale(opts)
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
	width := rows * heads * kv.HeadDim
	if err := need("decode attention output", out.N, width); err != nil {
		return err
	}
	if err := need("decode attention query", q.N, width); err != nil {
		return err
	}
	if rows == 0 {
		return nil
	}
	dims, err := attentionDims(rows, heads, kv.HeadDim)
	if err != nil {
		return err
	}
	d := k.d
	return d.do(func() error {
		// The KV write of the same step staged these slices with no context
		// bound; stage again under maxLen (a separate span) only if needed.
		meta, stride, err := d.stageDecode(kv, positions, tables, maxLen)
		if err != nil {
			return err
		}
		return d.launch("decode_attention_f32", dims, ptrArg(out.Ptr), ptrArg(q.Ptr), ptrArg(kv.K.Ptr), ptrArg(kv.V.Ptr), uint64(meta),
			i32Arg(rows), i32Arg(stride), i32Arg(heads), i32Arg(kv.KVHeads), i32Arg(kv.HeadDim), i32Arg(kv.PageSize), f32Arg(scale))
	})
}
