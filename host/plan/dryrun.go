package plan

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	devcpu "github.com/kvhost/kvhost/host/device/cpu"
	"github.com/kvhost/kvhost/host/device/dry"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model"
)

// dryRun is host/model's own model over a dry device (host/device/dry):
// the caching allocator its activations come from, sized like the CPU
// device of threads workers, and pools laid out as the configurator
// declared over address space alone. Running its Forward or capturing its
// decode graphs makes exactly the allocation requests serve's do, with no
// weights in memory and no arithmetic, so plan needs no copy of any
// architecture's forward.
type dryRun struct {
	a     *alloc.Allocator
	m     *model.Model
	pools *kv.Set
}

// newDryRun builds the dry model; with a layout, pools of one page of
// tokens per token pool (or tokens' worth: page tables wrap) and one slot
// per state pool.
func newDryRun(c model.Config, l *kv.Layout, tokens, threads int, allocName string) (*dryRun, error) {
	dev := dry.New(devcpu.Sizer{Threads: threads})
	d := &dryRun{a: alloc.New(allocName, dev)}
	var err error
	if d.m, err = model.NewDry(c, dev, d.a); err != nil {
		return nil, fmt.Errorf("plan: dry run: %w", err)
	}
	if l == nil {
		return d, nil
	}
	units := make([]int, len(l.Pools))
	for i, p := range l.Pools {
		units[i] = 1
		if p.Tokens() {
			units[i] = max(1, (tokens+p.PageSize-1)/p.PageSize) * p.PageSize
		}
	}
	next := device.Ptr(1 << 44) // pool buffers: addresses the allocator never sees
	d.pools, err = kv.Over(l, units, func(_, _ int, bytes int64) (device.Span, error) {
		sp := device.Span{Ptr: next, Bytes: bytes}
		next += device.Ptr((bytes + 4095) / 4096 * 4096)
		return sp, nil
	})
	if err != nil {
		return nil, fmt.Errorf("plan: dry run pools: %w", err)
	}
	return d, nil
}

// ActivationPeak runs the profile forwards (ProfileBatches) of c's model
// over pools laid out as l, as boot's profile does, and returns the
// caching allocator's peak reserved bytes above the workspaces (segments,
// what the device is charged) and the segment the largest single request
// needs.
func ActivationPeak(c model.Config, l *kv.Layout, batches [][]SeqShape, threads, logitsChunk int) (peakReserved, largestSegment int64, err error) {
	before, st, err := profileStats(c, l, batches, threads, logitsChunk)
	if err != nil {
		return 0, 0, err
	}
	return st.PeakReserved - before.Reserved, alloc.SegmentSize(alloc.RoundSize(st.PeakRequest)), nil
}

// profileStats runs the forwards of batches over the dry model and returns
// the activation allocator's counters before the first and after the last
// (the peaks are those of the forwards alone).
func profileStats(c model.Config, l *kv.Layout, batches [][]SeqShape, threads, logitsChunk int) (before, after alloc.Stats, err error) {
	tokens := 1
	for _, b := range batches {
		n := 0
		for _, s := range b {
			n += s.N
		}
		tokens = max(tokens, n)
	}
	d, err := newDryRun(c, l, tokens, threads, "profile")
	if err != nil {
		return before, after, err
	}
	d.m.LogitsChunk = logitsChunk
	d.a.ResetPeak()
	before = d.a.Stats()
	for _, b := range batches {
		if err := d.m.Forward(d.pools, ProfileSeqs(b, d.pools), nil); err != nil {
			return before, after, fmt.Errorf("plan: dry-run profile forward: %w", err)
		}
	}
	return before, d.a.Stats(), nil
}

// AttentionWorkspace is the workspace bytes host/model takes at load for
// c's model on the CPU device of threads workers (the attention scratch,
// sized by the kernels for every layer's shape).
func AttentionWorkspace(c model.Config, threads int) (int64, error) {
	d, err := newDryRun(c, nil, 0, threads, "workspaces")
	if err != nil {
		return 0, err
	}
	return d.m.Workspaces().Total(), nil
}

// GraphPool captures c's decode step for every bucket, largest first, into
// one private pool after the graph-shared logits buffer — host/model's
// CaptureDecodeGraphs itself, over the dry device — and returns the pool's
// ledger row (its device bytes are what capture costs).
func GraphPool(c model.Config, l *kv.Layout, buckets []int, threads int) (ledger.Usage, error) {
	d, err := newDryRun(c, l, 1, threads, "caching")
	if err != nil {
		return ledger.Usage{}, err
	}
	g, err := d.m.CaptureDecodeGraphs(d.pools, buckets)
	if err != nil {
		return ledger.Usage{}, fmt.Errorf("plan: dry-run graph capture: %w", err)
	}
	defer g.Close()
	for _, u := range (ledger.Caching{A: d.a}).Usage() {
		if u.Name == "caching/"+GraphPoolName {
			return u, nil
		}
	}
	return ledger.Usage{}, fmt.Errorf("plan: no graph pool row")
}
