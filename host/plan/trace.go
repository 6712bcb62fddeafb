package plan

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
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

// ProfileTokens is how many KV slots a profile pool needs: page tables wrap
// around a small pool, so one chunk's worth of pages is enough.
func ProfileTokens(chunk, pageSize int) int {
	return (chunk + pageSize - 1) / pageSize * pageSize
}

// ProfileSeqs turns shapes into model sequences over a pool of pages pages:
// page tables wrap around, so any position maps to a valid page.
func ProfileSeqs(shapes []SeqShape, pages, pageSize int) []model.Seq {
	out := make([]model.Seq, len(shapes))
	for i, s := range shapes {
		table := make([]int32, (s.Start+s.N+pageSize-1)/pageSize)
		for j := range table {
			table[j] = int32((j + i) % pages)
		}
		toks := make([]int32, s.N)
		for j := range toks {
			toks[j] = int32((j*7 + i) % 13)
		}
		out[i] = model.Seq{Tokens: toks, Start: s.Start, Pages: table, LogitRows: s.LogitRows}
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
