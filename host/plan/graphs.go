package plan

import (
	"fmt"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/ledger"
	"github.com/kvhost/kvhost/host/model"
)

// GraphPoolName is the caching allocator's private pool for decode graphs
// (host/model.CaptureDecodeGraphs).
const GraphPoolName = "decode-graphs"

// DecodeBuckets are the decode batch sizes captured for a graph max batch
// (spec §2's capture list), none above maxRunning; nil when graphs are off.
func DecodeBuckets(graphMaxBS, maxRunning int) []int {
	if graphMaxBS <= 0 {
		return nil
	}
	var out []int
	for _, b := range budget.DecodeCaptureBatches(graphMaxBS) {
		if b <= maxRunning {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		out = []int{min(graphMaxBS, maxRunning)}
	}
	return out
}

// decodeTrace lists the caching-allocator requests of one captured decode
// step of rows sequences (host/model/graphs.go decodeStep), in order.
func decodeTrace(c model.Config, rows int) []op {
	var t tracer
	x := t.buf(rows * c.Hidden)
	t.layers(c, rows)
	t.free(x)
	return t.ops
}

// GraphPool replays the capture of every bucket, largest first, into one
// private pool after the graph-shared logits buffer, and returns the pool's
// ledger row (its device bytes are what capture costs).
func GraphPool(c model.Config, buckets []int) (ledger.Usage, error) {
	a := alloc.New("caching", &simDriver{next: 1 << 46})
	id := a.NewPrivatePool(GraphPoolName)
	maxBS := 0
	for _, b := range buckets {
		maxBS = max(maxBS, b)
	}
	if _, err := a.AllocIn(id, int64(maxBS)*int64(c.Vocab)*4, alloc.Graph); err != nil {
		return ledger.Usage{}, err
	}
	for i := len(buckets) - 1; i >= 0; i-- {
		if err := a.BeginCapture(id); err != nil {
			return ledger.Usage{}, err
		}
		ptrs := map[int]device.Ptr{}
		for _, o := range decodeTrace(c, buckets[i]) {
			if o.free {
				if err := a.Free(ptrs[o.slot]); err != nil {
					return ledger.Usage{}, fmt.Errorf("plan: graph replay: %w", err)
				}
				continue
			}
			p, err := a.Alloc(o.bytes, alloc.Graph)
			if err != nil {
				return ledger.Usage{}, fmt.Errorf("plan: graph replay: %w", err)
			}
			ptrs[o.slot] = p
		}
		a.EndCapture()
	}
	for _, u := range (ledger.Caching{A: a}).Usage() {
		if u.Name == "caching/"+GraphPoolName {
			return u, nil
		}
	}
	return ledger.Usage{}, fmt.Errorf("plan: no graph pool row")
}
