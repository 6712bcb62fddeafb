package plan

import (
	"github.com/kvhost/kvhost/host/budget"
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
