package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
)

// KVType is the storage encoding of a paged KV cache, numbered as
// host/device.KVDType (the CPU device converts by value).
type KVType uint8

const (
	KVF32   KVType = iota // IEEE binary32
	KVF16                 // IEEE binary16
	KVBF16                // bfloat16
	KVE4M3                // OCP FP8 E4M3, unscaled
	KVE5M2                // OCP FP8 E5M2, unscaled
	KVMXFP8               // E4M3 elements, one E8M0 scale per 32 elements
	KVNVFP4               // E2M1 pairs (first element in the low nibble), one E4M3 scale per 16
)

var kvTypeNames = [...]string{"f32", "f16", "bf16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "nvfp4"}

func (t KVType) String() string {
	if int(t) < len(kvTypeNames) {
		return kvTypeNames[t]
	}
	return fmt.Sprintf("kvtype(%d)", uint8(t))
}

// ScaleBlock is the number of elements one scale byte covers (0: none).
func (t KVType) ScaleBlock() int {
	switch t {
	case KVMXFP8:
		return 32
	case KVNVFP4:
		return 16
	}
	return 0
}

// RowBytes is the storage of n elements (for the block-scaled encodings n is
// a multiple of ScaleBlock).
func (t KVType) RowBytes(n int) int {
	switch t {
	case KVF32:
		return 4 * n
	case KVF16, KVBF16:
		return 2 * n
	case KVNVFP4:
		return (n + 1) / 2
	}
	return n
}

// ScaleBytes is the scale storage of n elements (0 without block scales).
func (t KVType) ScaleBytes(n int) int {
	if b := t.ScaleBlock(); b > 0 {
		return (n + b - 1) / b
	}
	return 0
}

// PagedKV is one layer's paged KV cache. K holds rows of KVHeads·HeadDim
// elements and V rows of KVHeads·VHeadDim, both in Type's encoding: row r at
// byte r·Type.RowBytes(row elements), its block scales at
// r·Type.ScaleBytes(row elements) of KScale / VScale. Head h's part of a row
// starts at element h·HeadDim (a multiple of the scale block, so blocks never
// straddle heads). A sequence's token at position pos lives in row
// pageTable[pos/PageSize]·PageSize + pos%PageSize.
//
// VInK is a latent (MLA) cache: one KV head, no V rows; the value of a token
// is the first VHeadDim elements of its K row.
type PagedKV struct {
	Type           KVType
	K, V           []byte
	KScale, VScale []byte
	PageSize       int
	KVHeads        int
	HeadDim        int
	VHeadDim       int
	VInK           bool
}

func (kv PagedKV) kRow() int { return kv.KVHeads * kv.HeadDim }
func (kv PagedKV) vRow() int { return kv.KVHeads * kv.VHeadDim }

// Slots is the number of rows the K span holds.
func (kv PagedKV) Slots() int {
	if rb := kv.Type.RowBytes(kv.kRow()); rb > 0 {
		return len(kv.K) / rb
	}
	return 0
}

// NewPagedKV allocates a zeroed cache of slots rows (tests, gpu-check and
// benchmarks; the host allocates device memory and wraps it instead).
func NewPagedKV(t KVType, slots, pageSize, kvHeads, headDim, vHeadDim int, vInK bool) PagedKV {
	kv := PagedKV{Type: t, PageSize: pageSize, KVHeads: kvHeads, HeadDim: headDim, VHeadDim: vHeadDim, VInK: vInK}
	kv.K = make([]byte, slots*t.RowBytes(kv.kRow()))
	kv.KScale = make([]byte, slots*t.ScaleBytes(kv.kRow()))
	if !vInK {
		kv.V = make([]byte, slots*t.RowBytes(kv.vRow()))
		kv.VScale = make([]byte, slots*t.ScaleBytes(kv.vRow()))
	}
	return kv
}

// Validate checks the shape against the spans and names what is wrong.
func (kv PagedKV) Validate() error {
	switch {
	case int(kv.Type) >= len(kvTypeNames):
		return fmt.Errorf("cpu: kv cache type %d unknown: %w", kv.Type, ErrShape)
	case kv.PageSize <= 0 || kv.KVHeads <= 0 || kv.HeadDim <= 0 || kv.VHeadDim <= 0:
		return fmt.Errorf("cpu: kv cache page size %d, kv heads %d, head dims %d/%d must be positive: %w", kv.PageSize, kv.KVHeads, kv.HeadDim, kv.VHeadDim, ErrShape)
	case kv.VInK && (kv.KVHeads != 1 || kv.VHeadDim > kv.HeadDim):
		return fmt.Errorf("cpu: latent kv cache needs one kv head (has %d) and v head dim %d within head dim %d: %w", kv.KVHeads, kv.VHeadDim, kv.HeadDim, ErrShape)
	}
	if b := kv.Type.ScaleBlock(); b > 0 && (kv.HeadDim%b != 0 || kv.VHeadDim%b != 0) {
		return fmt.Errorf("cpu: %s kv cache: head dims %d/%d must be multiples of its %d-element scale block: %w", kv.Type, kv.HeadDim, kv.VHeadDim, b, ErrShape)
	}
	slots := kv.Slots()
	check := func(name string, span []byte, rowBytes int) error {
		if len(span) < slots*rowBytes {
			return fmt.Errorf("cpu: kv cache %s holds %d bytes, %d slots need %d: %w", name, len(span), slots, slots*rowBytes, ErrShape)
		}
		return nil
	}
	if err := check("K scales", kv.KScale, kv.Type.ScaleBytes(kv.kRow())); err != nil {
		return err
	}
	if kv.VInK {
		return nil
	}
	if err := check("V", kv.V, kv.Type.RowBytes(kv.vRow())); err != nil {
		return err
	}
	return check("V scales", kv.VScale, kv.Type.ScaleBytes(kv.vRow()))
}

func (kv PagedKV) mustValid(what string) {
	if err := kv.Validate(); err != nil {
		panic(fmt.Sprintf("cpu: %s: %v", what, err))
	}
}

// slot maps a position through the page table, panicking on a slot outside
// the cache (a corrupt page table must not touch foreign memory silently).
func (kv PagedKV) slot(pageTable []int32, pos int) int {
	s := int(pageTable[pos/kv.PageSize])*kv.PageSize + pos%kv.PageSize
	if s < 0 || s >= kv.Slots() {
		panic(fmt.Sprintf("cpu: kv slot %d for position %d is outside the cache of %d slots", s, pos, kv.Slots()))
	}
	return s
}

// headRows locates head h's part of row s of K (v: of V, or of the K row
// for a latent cache): its encoded bytes from there to the end of the span,
// its scales likewise, and the strides of consecutive rows (rb bytes, sb
// scale bytes) — rows s, s+1, … of one page are consecutive.
func (kv PagedKV) headRows(s, h int, v bool) (data, scales []byte, rb, sb int) {
	t := kv.Type
	row, span, sc, stride := kv.kRow(), kv.K, kv.KScale, kv.HeadDim
	if v && !kv.VInK {
		row, span, sc, stride = kv.vRow(), kv.V, kv.VScale, kv.VHeadDim
	}
	rb, sb = t.RowBytes(row), t.ScaleBytes(row)
	data = span[s*rb+t.RowBytes(h*stride):]
	if sb > 0 {
		scales = sc[s*sb+t.ScaleBytes(h*stride):]
	}
	return data, scales, rb, sb
}

// decodeRows decodes head h's keys (v: values) of the rows consecutive
// cache rows from s into dst, row i at dst[i*ds:].
func (kv PagedKV) decodeRows(dst []float32, ds, s, rows, h int, v bool) {
	n := kv.HeadDim
	if v {
		n = kv.VHeadDim
	}
	data, scales, rb, sb := kv.headRows(s, h, v)
	eb, es := kv.Type.RowBytes(n), kv.Type.ScaleBytes(n)
	for i := range rows {
		var sc []byte
		if sb > 0 {
			sc = scales[i*sb:][:es]
		}
		DecodeKV(kv.Type, dst[i*ds:][:n], data[i*rb:][:eb], sc)
	}
}

// WriteKV encodes n rows of k ([n, KVHeads·HeadDim]) and v ([n,
// KVHeads·VHeadDim]; ignored for a latent cache) into positions
// startPos..startPos+n-1.
func WriteKV(kv PagedKV, k, v []float32, n int, pageTable []int32, startPos int) {
	kv.mustValid("write kv")
	kr, vr := kv.kRow(), kv.vRow()
	if len(k) < n*kr || (!kv.VInK && len(v) < n*vr) {
		panic(fmt.Sprintf("cpu: write kv: %d rows need %d k and %d v floats, have %d and %d", n, n*kr, n*vr, len(k), len(v)))
	}
	for j := range n {
		kv.writeRow(kv.slot(pageTable, startPos+j), k[j*kr:(j+1)*kr], v[min(len(v), j*vr):])
	}
}

// WriteKVRows encodes row i of k and v at position positions[i] of the
// sequence whose page table is tables[i].
func WriteKVRows(kv PagedKV, k, v []float32, positions []int32, tables [][]int32) {
	kv.mustValid("write kv rows")
	kr, vr := kv.kRow(), kv.vRow()
	rows := len(positions)
	if len(tables) < rows || len(k) < rows*kr || (!kv.VInK && len(v) < rows*vr) {
		panic(fmt.Sprintf("cpu: write kv rows: %d rows need %d tables, %d k and %d v floats, have %d, %d, %d", rows, rows, rows*kr, rows*vr, len(tables), len(k), len(v)))
	}
	for i, pos := range positions {
		kv.writeRow(kv.slot(tables[i], int(pos)), k[i*kr:(i+1)*kr], v[min(len(v), i*vr):])
	}
}

func (kv PagedKV) writeRow(s int, k, v []float32) {
	t := kv.Type
	kr, vr := kv.kRow(), kv.vRow()
	rb, sb := t.RowBytes(kr), t.ScaleBytes(kr)
	EncodeKV(t, kv.K[s*rb:(s+1)*rb], kv.KScale[s*sb:(s+1)*sb], k[:kr])
	if kv.VInK {
		return
	}
	rb, sb = t.RowBytes(vr), t.ScaleBytes(vr)
	EncodeKV(t, kv.V[s*rb:(s+1)*rb], kv.VScale[s*sb:(s+1)*sb], v[:vr])
}

// EncodeKV writes src in encoding t: data gets t.RowBytes(len(src)) bytes and
// scales t.ScaleBytes(len(src)) (len(src) a multiple of the scale block).
// Rounding is to nearest even throughout; f16 and bf16 keep infinities and
// NaN, the FP8 encodings saturate (F32ToE4M3, F32ToE5M2), and a block scale
// comes from its block's largest magnitude (mxScale, nvfp4Scale) — a NaN
// anywhere in a block makes the whole block decode to NaN.
func EncodeKV(t KVType, data, scales []byte, src []float32) {
	n := len(src)
	data, scales = data[:t.RowBytes(n)], scales[:t.ScaleBytes(n)]
	switch t {
	case KVF32:
		copy(bytesF32(data), src)
	case KVF16:
		F32ToF16Bytes(data, src)
	case KVBF16:
		for i := f32ToBF16Vec(data, src); i < n; i++ {
			binary.LittleEndian.PutUint16(data[2*i:], F32ToBF16(src[i]))
		}
	case KVE4M3:
		for i, f := range src {
			data[i] = fmtE4M3.encode(f)
		}
	case KVE5M2:
		for i, f := range src {
			data[i] = fmtE5M2.encode(f)
		}
	case KVMXFP8:
		for b := range scales {
			blk := src[b*32 : (b+1)*32]
			amax, nan := blockMax(blk)
			if nan {
				scales[b] = 0xff
				clear(data[b*32 : (b+1)*32])
				continue
			}
			x := mxScale(amax)
			scales[b] = x
			inv := float32(math.Ldexp(1, 127-int(x))) // 2^-X, exact (X ≥ -127)
			for j, f := range blk {
				data[b*32+j] = fmtE4M3.encode(f * inv)
			}
		}
	case KVNVFP4:
		for b := range scales {
			blk := src[b*16 : (b+1)*16]
			out := data[b*8 : (b+1)*8]
			amax, nan := blockMax(blk)
			if nan {
				scales[b] = fmtE4M3.nan
				clear(out)
				continue
			}
			c := nvfp4Scale(amax)
			scales[b] = c
			s := E4M3ToF32(c)
			for j := range out {
				if s == 0 {
					out[j] = 0
					continue
				}
				out[j] = e2m1Encode(blk[2*j], s) | e2m1Encode(blk[2*j+1], s)<<4
			}
		}
	default:
		panic(fmt.Sprintf("cpu: encode kv: unknown type %d", t))
	}
}

// blockMax is the largest magnitude of a block and whether it holds a NaN.
func blockMax(x []float32) (float32, bool) {
	var m float32
	for _, f := range x {
		if f != f {
			return 0, true
		}
		m = max(m, float32(math.Abs(float64(f))))
	}
	return m, false
}

// DecodeKV writes len(dst) elements stored in encoding t (data and scales as
// EncodeKV lays them out) to dst as float32, exactly: every encoding's
// values are float32 values.
func DecodeKV(t KVType, dst []float32, data, scales []byte) {
	n := len(dst)
	switch t {
	case KVF32:
		copy(dst, bytesF32(data[:4*n]))
	case KVF16:
		for i := f16ToF32Vec(dst, data); i < n; i++ {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	case KVBF16:
		for i := bf16ToF32Vec(dst, data); i < n; i++ {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(data[2*i:]))
		}
	case KVE4M3:
		for i := e4m3ToF32Vec(dst, data, nil); i < n; i++ {
			dst[i] = e4m3LUT[data[i]]
		}
	case KVE5M2:
		for i := e5m2ToF32Vec(dst, data); i < n; i++ {
			dst[i] = e5m2LUT[data[i]]
		}
	case KVMXFP8:
		for i := e4m3ToF32Vec(dst, data, scales); i < n; i++ {
			dst[i] = float32(float64(e4m3LUT[data[i]]) * float64(E8M0ToF32(scales[i/32])))
		}
	case KVNVFP4:
		for i := nvfp4ToF32Vec(dst, data, scales); i < n; i++ {
			dst[i] = E2M1ToF32(data[i/2]>>(4*uint(i&1))) * e4m3LUT[scales[i/16]]
		}
	default:
		panic(fmt.Sprintf("cpu: decode kv: unknown type %d", t))
	}
}
