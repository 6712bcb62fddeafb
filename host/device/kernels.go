package device

import (
	"fmt"

	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// DType is the element type of a weight in device memory.
type DType uint8

// Weight element types. The numbering is kernels/cpu.DType's (a test holds
// them equal), which also names them and knows their block layouts; the
// CUDA kernels' DT_* constants use the same numbers.
const (
	F32 DType = iota
	F16
	BF16
	Q8_0
	Q4_0
	Q4_1
	Q5_0
	Q5_1
	Q2_K
	Q3_K
	Q4_K
	Q5_K
	Q6_K
	IQ4_NL
	IQ4_XS
	MXFP4
)

func (d DType) String() string { return kcpu.DType(d).String() }

// Quantized reports whether d is block-quantized.
func (d DType) Quantized() bool { return kcpu.DType(d).Quantized() }

// Buf is a span of N float32 values in device memory (activations, norms,
// logits).
type Buf struct {
	Ptr Ptr
	N   int
}

// Slice returns the sub-span [off, off+n) in elements.
func (b Buf) Slice(off, n int) Buf {
	if off < 0 || n < 0 || off+n > b.N {
		panic("device: Buf.Slice out of range")
	}
	return Buf{Ptr: b.Ptr + Ptr(off*4), N: n}
}

// Bytes is the size of the span in bytes.
func (b Buf) Bytes() int64 { return int64(b.N) * 4 }

// Weight is a row-major matrix (Rows output features of Cols inputs) or, with
// Rows == 1, a vector, stored in device memory in Type.
type Weight struct {
	Ptr   Ptr
	Type  DType
	Rows  int
	Cols  int
	Bytes int64
}

// KVDType is the storage encoding of a KV cache (serve's --kv-cache-dtype).
// Every encoding stores a head row of HeadDim elements contiguously; the
// block-scaled ones keep their scales in a separate span (KVLayer.KScale).
type KVDType uint8

// KV cache encodings. The byte sizes are RowBytes and ScaleBytes; the
// configurators declare the same sizes (configurators/layout).
const (
	KVF32     KVDType = iota // 4 bytes per element
	KVF16                    // IEEE half
	KVBF16                   // bfloat16
	KVFP8E4M3                // OCP FP8 E4M3 (saturating, no inf), unscaled
	KVFP8E5M2                // OCP FP8 E5M2, unscaled
	KVMXFP8                  // E4M3 values, one E8M0 scale byte per 32 elements of a head row
	KVNVFP4                  // packed E2M1 pairs, one E4M3 scale byte per 16 elements of a head row
)

var kvDTypeNames = [...]string{"f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "nvfp4"}

func (d KVDType) String() string {
	if int(d) < len(kvDTypeNames) {
		return kvDTypeNames[d]
	}
	return fmt.Sprintf("kvdtype(%d)", uint8(d))
}

// KVDTypes lists every encoding, in declaration order.
func KVDTypes() []KVDType {
	out := make([]KVDType, len(kvDTypeNames))
	for i := range out {
		out[i] = KVDType(i)
	}
	return out
}

// ParseKVDType reads a --kv-cache-dtype value; the sdk's spellings (fp32,
// fp16, fp4) are accepted too.
func ParseKVDType(s string) (KVDType, error) {
	switch s {
	case "fp32":
		return KVF32, nil
	case "fp16":
		return KVF16, nil
	case "fp4":
		return KVNVFP4, nil
	}
	for i, n := range kvDTypeNames {
		if n == s {
			return KVDType(i), nil
		}
	}
	return 0, fmt.Errorf("device: kv cache dtype %q: want one of %v", s, kvDTypeNames)
}

// ScaleBlock is the number of elements one scale byte covers (0: none).
func (d KVDType) ScaleBlock() int {
	switch d {
	case KVMXFP8:
		return 32
	case KVNVFP4:
		return 16
	}
	return 0
}

// RowBytes is the storage of n elements (a head row; n a multiple of
// ScaleBlock for the block-scaled encodings).
func (d KVDType) RowBytes(n int) int64 {
	switch d {
	case KVF32:
		return 4 * int64(n)
	case KVF16, KVBF16:
		return 2 * int64(n)
	case KVNVFP4:
		return int64(n+1) / 2
	}
	return int64(n)
}

// ScaleBytes is the scale storage of n elements (0 without block scales).
func (d KVDType) ScaleBytes(n int) int64 {
	if b := d.ScaleBlock(); b > 0 {
		return int64((n + b - 1) / b)
	}
	return 0
}

// Span is Bytes bytes of device memory at Ptr.
type Span struct {
	Ptr   Ptr
	Bytes int64
}

// KVLayer is one layer's paged KV cache. K holds Slots rows of
// KVHeads·HeadDim elements, V Slots rows of KVHeads·VHeadDim, both in
// DType's encoding (row r at byte r·DType.RowBytes(row elements)); KScale
// and VScale hold the block scales of the same rows when DType has them. A
// sequence's token at position pos lives in slot
// pageTable[pos/PageSize]·PageSize + pos%PageSize.
//
// VInK is MLA's latent cache: there is no V buffer, the values of a token
// are the first VHeadDim elements of its K row (the compressed c_kv, with
// the rope key after it), so V and VScale are zero spans.
type KVLayer struct {
	DType          KVDType
	K, V           Span
	KScale, VScale Span
	Slots          int
	PageSize       int
	KVHeads        int
	HeadDim        int
	VHeadDim       int
	VInK           bool
}

// KRowElems and VRowElems are the elements of one token's K and V rows.
func (kv KVLayer) KRowElems() int { return kv.KVHeads * kv.HeadDim }
func (kv KVLayer) VRowElems() int { return kv.KVHeads * kv.VHeadDim }

// Validate checks the shape against the spans and names what is wrong.
func (kv KVLayer) Validate() error {
	switch {
	case int(kv.DType) >= len(kvDTypeNames):
		return fmt.Errorf("device: kv layer dtype %d unknown", kv.DType)
	case kv.Slots <= 0 || kv.PageSize <= 0 || kv.Slots%kv.PageSize != 0:
		return fmt.Errorf("device: kv layer of %d slots is not a positive number of pages of %d", kv.Slots, kv.PageSize)
	case kv.KVHeads <= 0 || kv.HeadDim <= 0 || kv.VHeadDim <= 0:
		return fmt.Errorf("device: kv layer shape %d heads × %d (v %d) must be positive", kv.KVHeads, kv.HeadDim, kv.VHeadDim)
	case kv.VInK && (kv.VHeadDim > kv.HeadDim || kv.KVHeads != 1):
		return fmt.Errorf("device: latent kv layer: v head dim %d must fit in head dim %d with one kv head (have %d)", kv.VHeadDim, kv.HeadDim, kv.KVHeads)
	}
	if b := kv.DType.ScaleBlock(); b > 0 && (kv.HeadDim%b != 0 || kv.VHeadDim%b != 0) {
		return fmt.Errorf("device: %s kv: head dims %d/%d must be multiples of its %d-element scale block", kv.DType, kv.HeadDim, kv.VHeadDim, b)
	}
	need := func(name string, s Span, rowBytes int64) error {
		if want := rowBytes * int64(kv.Slots); s.Ptr == 0 || s.Bytes < want {
			return fmt.Errorf("device: kv layer %s holds %d bytes, %d slots need %d", name, s.Bytes, kv.Slots, want)
		}
		return nil
	}
	if err := need("K", kv.K, kv.DType.RowBytes(kv.KRowElems())); err != nil {
		return err
	}
	if kv.DType.ScaleBlock() > 0 {
		if err := need("K scales", kv.KScale, kv.DType.ScaleBytes(kv.KRowElems())); err != nil {
			return err
		}
	}
	if kv.VInK {
		return nil
	}
	if err := need("V", kv.V, kv.DType.RowBytes(kv.VRowElems())); err != nil {
		return err
	}
	if kv.DType.ScaleBlock() > 0 {
		return need("V scales", kv.VScale, kv.DType.ScaleBytes(kv.VRowElems()))
	}
	return nil
}

// AttnOpts are the per-layer choices of an attention call beyond its
// shapes. The zero value is invalid (Scale 0); most models set only Scale.
type AttnOpts struct {
	// Scale multiplies q·k (1/sqrt(head_dim) for most models; Gemma's
	// query_pre_attn_scalar, DeepSeek's YaRN mscale).
	Scale float32
	// Window > 0 limits a query at position p to keys at positions
	// p-Window+1 .. p (HF's sliding_window convention); pages wholly before
	// that may have been released and are never read.
	Window int
	// SoftCap > 0 replaces each scaled logit s by SoftCap·tanh(s/SoftCap)
	// before the softmax (Gemma 2).
	SoftCap float32
	// Sinks, when its Ptr is set, is an F32 vector of one learned logit per
	// query head that joins the softmax's denominator as a key with no value
	// (gpt-oss).
	Sinks Weight
}

// AttnShape is what an attention call's scratch depends on: the query
// heads and the layer's KV heads and head dims (K and V).
type AttnShape struct {
	Heads, KVHeads, HeadDim, VHeadDim int
}

// RopeSpec describes a rotary embedding; devices build their tables once per
// spec (Rope) and reuse them.
type RopeSpec struct {
	HeadDim, RotDim int
	Theta           float64
	Neox            bool // rotate (x[i], x[i+d/2]) instead of adjacent pairs
	Scaling         string
	Factor          float64
	LowFreqFactor   float64
	HighFreqFactor  float64
	OriginalMaxPos  int
	// FreqFactors divides each of the RotDim/2 frequencies after the
	// Scaling rule (GGUF rope_freqs.weight, Llama-3.1); nil when absent.
	FreqFactors []float64 `json:",omitempty"`
	// YaRN (Scaling "yarn", transformers' rule, or "deepseek_yarn",
	// DeepSeek's attention factor; kernels/cpu.RopeScaling says exactly):
	// beta_fast/beta_slow (0: 32 and 1), DeepSeek's mscale/mscale_all_dim,
	// an explicit attention_factor, and NoTruncate for rope_scaling
	// "truncate": false (gpt-oss). Factor and OriginalMaxPos are shared with
	// llama3. The attention factor multiplies the rotated values; DeepSeek's
	// softmax-scale correction is rotary.SoftmaxScale.
	BetaFast, BetaSlow   float64 `json:",omitempty"`
	Mscale, MscaleAllDim float64 `json:",omitempty"`
	AttnFactor           float64 `json:",omitempty"`
	NoTruncate           bool    `json:",omitempty"`
	// RotOffset is the first rotated element of each head (default 0):
	// DeepSeek rotates the last qk_rope_head_dim elements of a query head
	// (HeadDim qk_nope+qk_rope, RotOffset qk_nope) and of kv_a_proj's output
	// row (one head of kv_lora_rank+qk_rope, RotOffset kv_lora_rank).
	RotOffset int `json:",omitempty"`
}

// Rope is a device's prepared rotary embedding.
type Rope interface{ Spec() RopeSpec }

// Kernels is the compute set a Llama-family forward needs. Integer side data
// (token ids, positions, page tables, row indices) arrives as host slices:
// the CPU device reads them in place, a GPU device stages them into fixed
// device buffers before launching.
type Kernels interface {
	// MatMul: out[m, w.Rows] = x[m, w.Cols] · wᵀ.
	MatMul(out, x Buf, m int, w Weight) error
	// AddBias adds the vector bias (Rows 1) to each of m rows of out.
	AddBias(out Buf, bias Weight, m int) error
	// Add: out = a + b elementwise (out may alias a).
	Add(out, a, b Buf) error
	// RMSNorm normalises rows×dim values of x into out with weight (Rows 1).
	RMSNorm(out, x Buf, weight Weight, rows, dim int, eps float32) error
	// SiLUMul: out = silu(gate) * up.
	SiLUMul(out, gate, up Buf) error
	// NewRope prepares a rotary embedding.
	NewRope(spec RopeSpec) (Rope, error)
	// ApplyRope rotates x [n, heads*HeadDim] in place; row i at positions[i].
	ApplyRope(r Rope, x Buf, n, heads int, positions []int32) error
	// Embedding gathers rows of table for ids into out [len(ids), Cols].
	Embedding(out Buf, table Weight, ids []int32) error
	// WriteKV stores n rows of k ([n, KRowElems]) and v ([n, VRowElems];
	// ignored for a VInK layer) at positions startPos.. of a sequence,
	// encoding them in the layer's dtype.
	WriteKV(kv KVLayer, k, v Buf, n int, pageTable []int32, startPos int) error
	// Attention runs causal GQA for one sequence: q [n, heads*HeadDim], query i
	// at position startPos+i over positions 0..startPos+i (within o.Window);
	// out is [n, heads*VHeadDim].
	Attention(out, q Buf, n, heads int, kv KVLayer, pageTable []int32, startPos int, o AttnOpts, scratch Buf) error
	// AttentionScratch is the scratch in floats Attention and DecodeAttention
	// need for layers of shape s, whatever the context length, the number of
	// query rows or the batch (a device sizes it once, at load).
	AttentionScratch(s AttnShape) int
	// GatherRows copies rows idx[j] of x [*, dim] to row j of out.
	GatherRows(out, x Buf, dim int, idx []int32) error
	// CopyToHost and CopyFromHost move float32 data across the host boundary.
	CopyToHost(dst []float32, src Buf) error
	CopyFromHost(dst Buf, src []float32) error
	// Upload copies raw bytes (weights) into device memory at p.
	Upload(p Ptr, src []byte) error
}

// DecodeKernels is the optional batched-decode capability that captured
// decode graphs use: every per-step value (positions, page tables) is read
// from a slice when the kernel runs, never passed by value, so a replay sees
// the values the runner wrote just before it.
type DecodeKernels interface {
	// WriteKVRows stores row i of k and v at positions[i] of the sequence
	// whose page table is tables[i].
	WriteKVRows(kv KVLayer, k, v Buf, positions []int32, tables [][]int32) error
	// DecodeAttention: row i of q attends to positions 0..positions[i] of
	// tables[i] (within o.Window); maxLen bounds every positions[i]+1. The
	// scratch is Kernels.AttentionScratch's.
	DecodeAttention(out, q Buf, heads int, kv KVLayer, positions []int32, tables [][]int32, o AttnOpts, scratch Buf, maxLen int) error
}

// Capturer records kernel launches into a graph instead of running them,
// like CUDA stream capture: buffers and host slices are bound at capture
// time; their contents are read when the graph is launched.
type Capturer interface {
	BeginCapture() error
	EndCapture() (Graph, error)
}

// Recorder is a Capturer whose capture runs nothing: between BeginCapture
// and EndCapture every kernel call is checked and recorded, and only
// Graph.Launch runs it (the CPU device; CUDA's capture runs each call
// eagerly as its warm-up). Code captured on a Recorder and closed
// unlaunched takes the device memory its allocations take and costs host
// time only: host/boot measures the runtime peak that way, without
// computing the profile forwards.
type Recorder interface {
	Capturer
	// RecordsOnly marks the capability; it does nothing.
	RecordsOnly()
}

// Graph is a captured sequence of kernel launches. Close releases what the
// device holds for it (a CUDA graph exec); the buffers it reads belong to the
// allocator pool it was captured in.
type Graph interface {
	Launch() error
	Launches() int
	Close() error
}
