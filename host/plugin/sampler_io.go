package plugin

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/kvhost/kvhost/sdk/sampler"
	"github.com/tetratelabs/wazero/api"
)

// SamplerIO are typed views of one sampler instance's I/O region
// (sdk/SAMPLER_ABI.md): the caller writes rows of stride K (the policy's
// K) and reads OutID and OutLogprob after Sample. Valid until the next
// call into the instance or Release.
type SamplerIO struct {
	Params     []float32 // [MaxBatch × len(params)], schema order
	Seed, Step []uint64
	NCand      []int32 // valid candidates per row, 1..K
	IDs        []int32 // [MaxBatch × K], sorted by descending logit
	Logits     []float32
	Logprobs   []float32
	History    []int32 // [MaxBatch × history], oldest first
	HistoryLen []int32
	State      []float32 // [MaxBatch × state], in and out
	OutID      []int32
	OutLogprob []float32
}

// SamplerInstance is one sampler instance with its views; one goroutine at
// a time, between Sampler.Acquire and Release.
type SamplerInstance struct {
	IO     SamplerIO
	s      *Sampler
	inst   *instance
	sample api.Function
	stack  []uint64
	header uint32
}

// view returns a typed, bounds- and alignment-checked view of n T at the
// address in header word w. Guest memory is only ever touched through
// these, re-derived after every call (memory growth moves it).
func view[T any](mem api.Memory, hdr []byte, w int, n int) ([]T, error) {
	off := binary.LittleEndian.Uint32(hdr[4*w:])
	var z T
	size := unsafe.Sizeof(z)
	if uintptr(off)%unsafe.Alignof(z) != 0 {
		return nil, fmt.Errorf("I/O header word %d: address %d is not %d-aligned", w, off, unsafe.Alignof(z))
	}
	if n == 0 {
		return nil, nil
	}
	b, ok := mem.Read(off, uint32(uintptr(n)*size))
	if !ok {
		return nil, fmt.Errorf("I/O header word %d: %d×%d bytes at %d lie outside guest memory (%d bytes)", w, n, size, off, mem.Size())
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), nil
}

// views re-derives IO from the guest's header, checking it against the
// configuration and descriptor.
func (si *SamplerInstance) views() error {
	mem := si.inst.mod.Memory()
	if mem == nil {
		return fmt.Errorf("the module has no memory")
	}
	if si.header%4 != 0 {
		return fmt.Errorf("I/O header address %d is not 4-aligned", si.header)
	}
	hdr, ok := mem.Read(si.header, 4*sampler.HeaderWords)
	if !ok || si.header == 0 {
		return fmt.Errorf("I/O header at %d lies outside guest memory", si.header)
	}
	word := func(i int) int { return int(binary.LittleEndian.Uint32(hdr[4*i:])) }
	d := si.s.desc
	b, k := si.s.m.rt.cfg.MaxBatch, si.s.k
	want := [...]int{sampler.IOMagic, b, k, len(d.Params), d.State, d.History}
	for i, v := range want {
		if word(i) != v {
			return fmt.Errorf("I/O header word %d is %d, want %d", i, word(i), v)
		}
	}
	var err error
	f32 := func(dst *[]float32, w, n int) {
		if err == nil {
			*dst, err = view[float32](mem, hdr, w, n)
		}
	}
	i32s := func(dst *[]int32, w, n int) {
		if err == nil {
			*dst, err = view[int32](mem, hdr, w, n)
		}
	}
	u64 := func(dst *[]uint64, w, n int) {
		if err == nil {
			*dst, err = view[uint64](mem, hdr, w, n)
		}
	}
	io := &si.IO
	f32(&io.Params, sampler.HdrParams, b*len(d.Params))
	u64(&io.Seed, sampler.HdrSeed, b)
	u64(&io.Step, sampler.HdrStep, b)
	i32s(&io.NCand, sampler.HdrNCand, b)
	i32s(&io.IDs, sampler.HdrIDs, b*k)
	f32(&io.Logits, sampler.HdrLogits, b*k)
	f32(&io.Logprobs, sampler.HdrLogprobs, b*k)
	i32s(&io.History, sampler.HdrHistory, b*d.History)
	i32s(&io.HistoryLen, sampler.HdrHistoryLen, b)
	f32(&io.State, sampler.HdrState, b*d.State)
	i32s(&io.OutID, sampler.HdrOutID, b)
	f32(&io.OutLogprob, sampler.HdrOutLogprob, b)
	return err
}
