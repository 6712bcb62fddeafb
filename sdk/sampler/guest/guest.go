package guest

import (
	"encoding/json"

	"github.com/kvhost/kvhost/sdk/sampler"
)

// Row is one sequence of a batch, as the policy function sees it.
// Candidates are sorted by descending logit (ties: lower id first); Logits
// and Logprobs may be modified as scratch; State persists across the
// sequence's steps.
type Row struct {
	IDs      []int32
	Logits   []float32
	Logprobs []float32
	Params   []float32 // in schema order
	Seed     uint64
	Step     uint64
	History  []int32 // oldest first
	State    []float32
}

// Func picks one of r.IDs and its logprob; an error fails the whole step.
type Func func(r *Row) (id int32, logprob float32, err error)

var (
	desc    sampler.Descriptor
	descRaw []byte
	policy  Func
	io      *region
)

// Register installs the policy; call it once, from init. It panics on an
// invalid descriptor, so a broken plugin fails its handshake at once.
func Register(d sampler.Descriptor, f Func) {
	if policy != nil {
		panic("guest: Register called twice")
	}
	d.ABI, d.Kind = sampler.ABIVersion, sampler.Kind
	if d.PreOps == nil {
		d.PreOps = []string{}
	}
	if d.Params == nil {
		d.Params = []sampler.Param{}
	}
	if err := d.Validate(); err != nil {
		panic(err)
	}
	raw, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	desc, descRaw, policy = d, raw, f
}

// region is the I/O region: the header words and the arrays they address.
type region struct {
	header                             [sampler.HeaderWords]uint32
	params, logits, logprobs, state    []float32
	outLogprob                         []float32
	seed, step                         []uint64
	nCand, ids, history, historyLen    []int32
	outID                              []int32
	maxBatch, maxK, nParams, nState, h int
}

func newRegion(maxBatch, maxK int) *region {
	r := &region{maxBatch: maxBatch, maxK: maxK, nParams: len(desc.Params), nState: desc.State, h: desc.History}
	r.params = make([]float32, maxBatch*max(1, r.nParams))
	r.seed = make([]uint64, maxBatch)
	r.step = make([]uint64, maxBatch)
	r.nCand = make([]int32, maxBatch)
	r.ids = make([]int32, maxBatch*maxK)
	r.logits = make([]float32, maxBatch*maxK)
	r.logprobs = make([]float32, maxBatch*maxK)
	r.history = make([]int32, maxBatch*max(1, r.h))
	r.historyLen = make([]int32, maxBatch)
	r.state = make([]float32, maxBatch*max(1, r.nState))
	r.outID = make([]int32, maxBatch)
	r.outLogprob = make([]float32, maxBatch)
	return r
}

// sample runs the policy over batch rows of stride k.
func (g *region) sample(batch, k int) int32 {
	if batch < 0 || batch > g.maxBatch || k <= 0 || k > g.maxK {
		return -1
	}
	var row Row
	for b := range batch {
		n := int(g.nCand[b])
		hl := int(g.historyLen[b])
		if n <= 0 || n > k || hl < 0 || hl > g.h {
			return -2
		}
		row = Row{
			IDs:      g.ids[b*k : b*k+n],
			Logits:   g.logits[b*k : b*k+n],
			Logprobs: g.logprobs[b*k : b*k+n],
			Params:   g.params[b*g.nParams : (b+1)*g.nParams],
			Seed:     g.seed[b],
			Step:     g.step[b],
			History:  g.history[b*g.h : b*g.h+hl],
			State:    g.state[b*g.nState : (b+1)*g.nState],
		}
		id, lp, err := policy(&row)
		if err != nil {
			return -3
		}
		g.outID[b], g.outLogprob[b] = id, lp
	}
	return 0
}
