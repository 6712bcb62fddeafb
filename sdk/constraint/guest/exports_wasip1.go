//go:build wasip1

package guest

import (
	"encoding/json"
	"unsafe"

	"github.com/kvhost/kvhost/sdk/constraint"
)

var (
	engine  Engine
	desc    []byte
	lastErr []byte
	// pinned keeps kvhost_malloc blocks reachable until kvhost_free.
	pinned = map[uint32][]byte{}
	region *ioRegion
)

// ioRegion is the I/O region of constraint ABI §I/O, allocated once.
type ioRegion struct {
	header                [constraint.HeaderWords]uint32
	handle, token, budget []int32
	status                []int32
	flags, mask           []uint32
	// masks keeps the last step's masks reachable while the host reads them.
	masks [][]uint32
}

// Register installs the plugin's engine. Call it once, from init().
func Register(e Engine) {
	if engine != nil {
		panic("guest: Register called twice")
	}
	engine = e
	d := e.Descriptor()
	b, err := json.Marshal(&d)
	if err != nil {
		panic(err)
	}
	desc = b
}

func addr[T any](s []T) uint32 {
	if len(s) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&s[0])))
}

func packed(b []byte) int64 { return int64(uint64(addr(b))<<32 | uint64(len(b))) }

func fail(err error) int32 {
	lastErr = []byte(err.Error())
	return Status(err)
}

// blockAt returns the first n bytes of the kvhost_malloc block at ptr.
func blockAt(ptr, n int32) ([]byte, bool) {
	b, ok := pinned[uint32(ptr)]
	if !ok || n < 0 || int(n) > len(b) {
		return nil, false
	}
	return b[:n], true
}

//go:wasmexport kvhost_abi_version
func exportABIVersion() int32 { return constraint.ABIVersion }

//go:wasmexport kvhost_describe
func exportDescribe() int64 { return packed(desc) }

//go:wasmexport kvhost_malloc
func exportMalloc(size int32) int32 {
	if size < 0 {
		return 0
	}
	b := make([]byte, max(size, 1))
	p := addr(b)
	pinned[p] = b
	return int32(p)
}

//go:wasmexport kvhost_free
func exportFree(ptr int32) { delete(pinned, uint32(ptr)) }

//go:wasmexport kvhost_last_error
func exportLastError() int64 { return packed(lastErr) }

//go:wasmexport kvhost_constraint_init
func exportInit(vocabPtr, vocabLen, maxBatch int32) int32 {
	if region != nil {
		return int32(addr(region.header[:]))
	}
	if engine == nil || maxBatch <= 0 || maxBatch > constraint.MaxBatch {
		lastErr = []byte("guest: no engine registered, or max_batch out of range")
		return 0
	}
	vocab, ok := blockAt(vocabPtr, vocabLen)
	if !ok {
		lastErr = []byte("guest: the vocabulary is not inside a kvhost_malloc block")
		return 0
	}
	// The block stays pinned for good: the engine aliases its bytes.
	if err := engine.Init(vocab); err != nil {
		lastErr = []byte(err.Error())
		return 0
	}
	n := int(maxBatch)
	r := &ioRegion{handle: make([]int32, n), token: make([]int32, n), budget: make([]int32, n),
		status: make([]int32, n), flags: make([]uint32, n), mask: make([]uint32, n), masks: make([][]uint32, n)}
	h := &r.header
	h[constraint.HdrMagic] = constraint.IOMagic
	h[constraint.HdrMaxBatch] = uint32(n)
	h[constraint.HdrVocab] = vocabSize(vocab)
	h[constraint.HdrHandle] = addr(r.handle)
	h[constraint.HdrToken] = addr(r.token)
	h[constraint.HdrBudget] = addr(r.budget)
	h[constraint.HdrStatus] = addr(r.status)
	h[constraint.HdrFlags] = addr(r.flags)
	h[constraint.HdrMask] = addr(r.mask)
	h[constraint.HdrWords] = (h[constraint.HdrVocab] + 31) / 32
	region = r
	return int32(addr(r.header[:]))
}

// vocabSize reads the token count of a KVV1 block.
func vocabSize(b []byte) uint32 {
	if len(b) < 8 {
		return 0
	}
	return uint32(b[4]) | uint32(b[5])<<8 | uint32(b[6])<<16 | uint32(b[7])<<24
}

//go:wasmexport kvhost_constraint_open
func exportOpen(ptr, n int32) int32 {
	spec, ok := blockAt(ptr, n)
	if !ok {
		lastErr = []byte("guest: the spec is not inside a kvhost_malloc block")
		return constraint.StatusBadSpec
	}
	h, err := engine.Open(spec)
	if err != nil {
		return fail(err)
	}
	return h
}

//go:wasmexport kvhost_constraint_fork
func exportFork(h int32) int32 {
	c, err := engine.Fork(h)
	if err != nil {
		return fail(err)
	}
	return c
}

//go:wasmexport kvhost_constraint_close
func exportClose(h int32) int32 {
	if err := engine.Close(h); err != nil {
		return fail(err)
	}
	return constraint.StatusOK
}

//go:wasmexport kvhost_constraint_step
func exportStep(rows int32) int32 {
	r := region
	if r == nil || rows < 0 || int(rows) > len(r.handle) {
		lastErr = []byte("guest: step before init, or rows out of range")
		return constraint.StatusFailed
	}
	engine.BeginStep()
	for i := range int(rows) {
		mask, flags, err := engine.Step(r.handle[i], r.token[i], int(r.budget[i]))
		r.masks[i] = mask
		if err != nil {
			r.status[i], r.flags[i], r.mask[i] = fail(err), 0, 0
			continue
		}
		r.status[i], r.flags[i], r.mask[i] = constraint.StatusOK, flags, addr(mask)
	}
	return constraint.StatusOK
}
