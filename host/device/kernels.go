package device

import kcpu "github.com/kvhost/kvhost/kernels/cpu"

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

// KVLayer is one layer's paged KV cache: K and V each hold Slots rows of
// KVHeads*HeadDim float32. A sequence's token at position pos lives in slot
// pageTable[pos/PageSize]*PageSize + pos%PageSize.
type KVLayer struct {
	K, V     Buf
	PageSize int
	KVHeads  int
	HeadDim  int
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
	// WriteKV stores n rows of k and v at positions startPos.. of a sequence.
	WriteKV(kv KVLayer, k, v Buf, n int, pageTable []int32, startPos int) error
	// Attention runs causal GQA for one sequence: q [n, heads*HeadDim], query i
	// at position startPos+i over positions 0..startPos+i.
	Attention(out, q Buf, n, heads int, kv KVLayer, pageTable []int32, startPos int, scale float32, scratch Buf) error
	// AttentionScratch is the scratch size in floats Attention needs.
	AttentionScratch(n, startPos int) int
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
	// tables[i]; maxLen bounds every positions[i]+1.
	DecodeAttention(out, q Buf, heads int, kv KVLayer, positions []int32, tables [][]int32, scale float32, scratch Buf, maxLen int) error
	DecodeAttentionScratch(maxLen int) int
}

// Capturer records kernel launches into a graph instead of running them,
// like CUDA stream capture: buffers and host slices are bound at capture
// time; their contents are read when the graph is launched.
type Capturer interface {
	BeginCapture() error
	EndCapture() (Graph, error)
}

// Graph is a captured sequence of kernel launches. Close releases what the
// device holds for it (a CUDA graph exec); the buffers it reads belong to the
// allocator pool it was captured in.
type Graph interface {
	Launch() error
	Launches() int
	Close() error
}
