package plan

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/model"
	kcpu "github.com/kvhost/kvhost/kernels/cpu"
)

// SeqShape is one sequence of a forward: N new tokens at positions Start..,
// with LogitRows rows of logits.
type SeqShape struct {
	N, Start, LogitRows int
}

// ProfileBatches are the worst-case forwards the slack must hold (engine
// rules: at most chunk new tokens per forward, decodes first, at most
// maxRunning sequences, positions below the context): a single prefill
// chunk ending at the last prompt position (the longest attention), then
// a mixed batch of min(maxRunning, chunk) − 1 decodes at the last position
// plus a prefill filling the chunk (most logits rows), then a chunk whose
// every row wants logits (input logprobs: full-vocabulary rows, computed in
// logits chunks). Boot runs exactly these as the profile forward; plan
// replays them.
func ProfileBatches(contextLen, chunk, maxRunning int) [][]SeqShape {
	n := min(chunk, contextLen-1)
	a := []SeqShape{{N: n, Start: contextLen - 1 - n, LogitRows: 1}}
	r := min(maxRunning, n)
	var b []SeqShape
	for range r - 1 {
		b = append(b, SeqShape{N: 1, Start: contextLen - 2, LogitRows: 1})
	}
	pn := n - (r - 1)
	b = append(b, SeqShape{N: pn, Start: contextLen - 1 - pn, LogitRows: 1})
	lp := []SeqShape{{N: n, Start: contextLen - 1 - n, LogitRows: n}}
	return [][]SeqShape{a, b, lp}
}

// ProfileUnits are the units a profile set of pools needs: page tables
// wrap around a small pool, so one chunk's worth of pages of each token
// pool is enough, and one slot of each state pool (slots wrap too); never
// more than upper.
func ProfileUnits(l *kv.Layout, chunk int, upper []int) []int {
	out := make([]int, len(l.Pools))
	for i, p := range l.Pools {
		out[i] = 1
		if p.Tokens() {
			out[i] = (chunk + p.PageSize - 1) / p.PageSize * p.PageSize
		}
		out[i] = min(out[i], upper[i])
	}
	return out
}

// ProfileSeqs turns shapes into model sequences over pools: page tables
// wrap around each token pool, so any position maps to a valid page, and
// slots wrap around each state pool.
func ProfileSeqs(shapes []SeqShape, pools *kv.Set) []model.Seq {
	out := make([]model.Seq, len(shapes))
	for i, s := range shapes {
		seq := model.Seq{Start: s.Start, LogitRows: s.LogitRows}
		for _, p := range pools.TokenPools() {
			table := make([]int32, p.PagesFor(s.Start+s.N))
			for j := range table {
				table[j] = int32((j + i) % p.Pages())
			}
			seq.Pages = append(seq.Pages, table)
		}
		for _, p := range pools.SlotPools() {
			seq.Slots = append(seq.Slots, int32(i%p.Slots()))
		}
		seq.Tokens = make([]int32, s.N)
		for j := range seq.Tokens {
			seq.Tokens[j] = int32((j*7 + i) % 13)
		}
		out[i] = seq
	}
	return out
}

// op is one step of a forward's allocation sequence: alloc of Bytes (slot
// names the live buffer) or free of slot.
type op struct {
	free  bool
	slot  int
	bytes int64
}

// forwardTrace lists the caching-allocator requests model.Forward makes,
// in order (host/model/forward.go: scope.buf, scope.free, release). It must
// follow that file; TestPlanMatchesServe fails when they drift apart.
func forwardTrace(c model.Config, seqs []SeqShape, logitsChunk int) []op {
	total, rows := 0, 0
	for _, s := range seqs {
		total += s.N
		rows += s.LogitRows
	}
	var t tracer
	x := t.buf(total * c.Hidden)
	t.layers(c, total)
	if rows > 0 {
		xl := t.buf(rows * c.Hidden)
		t.free(x)
		for r0 := 0; r0 < rows; r0 += logitsChunk {
			t.free(t.buf(min(logitsChunk, rows-r0) * c.Vocab))
		}
		t.free(xl)
	} else {
		t.free(x)
	}
	return t.ops
}

// tracer records a sequence of scope.buf and scope.free calls.
type tracer struct {
	ops  []op
	next int
}

func (t *tracer) buf(floats int) int {
	t.next++
	t.ops = append(t.ops, op{slot: t.next, bytes: int64(max(floats, 1)) * 4})
	return t.next
}

func (t *tracer) free(slot int) { t.ops = append(t.ops, op{free: true, slot: slot}) }

// layers traces every decoder layer over rows rows: host/model's
// attentionIn (h, q, k, v, attention output) then attentionOutAndMLP (frees
// q, k, v, the attention output, then gate and up, then h) — shared by the
// eager forward and the captured decode step.
func (t *tracer) layers(c model.Config, rows int) {
	for range c.Layers {
		h := t.buf(rows * c.Hidden)
		q := t.buf(rows * c.QRow())
		kk := t.buf(rows * c.KVRow())
		vv := t.buf(rows * c.KVRow())
		att := t.buf(rows * c.QRow())
		t.free(q)
		t.free(kk)
		t.free(vv)
		t.free(att)
		g := t.buf(rows * c.Intermediate)
		u := t.buf(rows * c.Intermediate)
		t.free(u)
		t.free(g)
		t.free(h)
	}
}

// simDriver hands out descending addresses, as the kernel's top-down mmap
// does, and charges nothing.
type simDriver struct{ next device.Ptr }

func (d *simDriver) Malloc(size int64) (device.Ptr, error) {
	d.next -= device.Ptr((size + 4095) / 4096 * 4096)
	d.next -= 1 << 20 // a gap, as separate mappings have
	return d.next, nil
}

func (d *simDriver) Free(device.Ptr) error { return nil }

// ActivationPeak replays the profile forwards through a fresh caching
// allocator and returns its peak reserved bytes above the workspace (segments, what the device
// is charged) and the largest segment any request of the trace needs.
func ActivationPeak(c model.Config, batches [][]SeqShape, threads, logitsChunk int) (peakReserved, largestSegment int64, err error) {
	if logitsChunk <= 0 {
		logitsChunk = model.DefaultLogitsChunk
	}
	a := alloc.New("profile", &simDriver{next: 1 << 46})
	// host/model holds the attention scratch workspace from load on; the
	// profile starts with it live.
	if _, err := a.Alloc(AttentionWorkspace(c, threads), alloc.Workspace); err != nil {
		return 0, 0, err
	}
	before := a.Stats().Reserved
	for _, b := range batches {
		ptrs := map[int]device.Ptr{}
		for _, o := range forwardTrace(c, b, logitsChunk) {
			if o.free {
				if err := a.Free(ptrs[o.slot]); err != nil {
					return 0, 0, fmt.Errorf("plan: replay: %w", err)
				}
				delete(ptrs, o.slot)
				continue
			}
			p, err := a.Alloc(o.bytes, alloc.Activations)
			if err != nil {
				return 0, 0, fmt.Errorf("plan: replay: %w", err)
			}
			ptrs[o.slot] = p
			largestSegment = max(largestSegment, alloc.SegmentSize(alloc.RoundSize(o.bytes)))
		}
	}
	return a.Stats().PeakReserved - before, largestSegment, nil
}

// AttentionWorkspace is the attention scratch host/model allocates at load
// on the CPU device: the kernels' own figure (a few tiles per worker,
// independent of the context length).
func AttentionWorkspace(c model.Config, threads int) int64 {
	s := c.AttnShape()
	return int64(kcpu.AttentionScratch(threads, s.HeadDim, s.VHeadDim)) * 4
}
