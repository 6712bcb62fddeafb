//go:build wasip1

package guest

import (
	"unsafe"

	"github.com/kvhost/kvhost/sdk/sampler"
)

//go:wasmexport kvhost_abi_version
func abiVersion() int32 { return sampler.ABIVersion }

//go:wasmexport kvhost_describe
func describe() int64 {
	if len(descRaw) == 0 {
		return 0
	}
	return int64(uint64(uintptr(unsafe.Pointer(&descRaw[0])))<<32 | uint64(len(descRaw)))
}

func addr[T any](s []T) uint32 { return uint32(uintptr(unsafe.Pointer(&s[0]))) }

//go:wasmexport kvhost_sampler_init
func samplerInit(maxBatch, maxK int32) int32 {
	if io != nil {
		return int32(addr(io.header[:]))
	}
	if policy == nil || maxBatch <= 0 || maxK <= 0 || int(maxK) > sampler.MaxCandidates {
		return 0
	}
	r := newRegion(int(maxBatch), int(maxK))
	h := &r.header
	h[sampler.HdrMagic] = sampler.IOMagic
	h[sampler.HdrMaxBatch], h[sampler.HdrMaxK] = uint32(maxBatch), uint32(maxK)
	h[sampler.HdrNParams], h[sampler.HdrNState], h[sampler.HdrNHistory] = uint32(r.nParams), uint32(r.nState), uint32(r.h)
	h[sampler.HdrParams] = addr(r.params)
	h[sampler.HdrSeed] = addr(r.seed)
	h[sampler.HdrStep] = addr(r.step)
	h[sampler.HdrNCand] = addr(r.nCand)
	h[sampler.HdrIDs] = addr(r.ids)
	h[sampler.HdrLogits] = addr(r.logits)
	h[sampler.HdrLogprobs] = addr(r.logprobs)
	h[sampler.HdrHistory] = addr(r.history)
	h[sampler.HdrHistoryLen] = addr(r.historyLen)
	h[sampler.HdrState] = addr(r.state)
	h[sampler.HdrOutID] = addr(r.outID)
	h[sampler.HdrOutLogprob] = addr(r.outLogprob)
	io = r
	return int32(addr(r.header[:]))
}

//go:wasmexport kvhost_sample
func sample(batch, k int32) int32 {
	if io == nil {
		return -1
	}
	return io.sample(int(batch), int(k))
}
