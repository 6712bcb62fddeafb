package plan

import (
	"fmt"
	"sort"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/budget"
)

// Moment kinds. A prefill or decode moment is a set of tensors live at the
// same instant of a forward or sampling step (spec §4): the headroom must
// hold the largest moment's sum, never just its largest tensor. A static
// entry is memory allocated once and held (graph pools, the graph-shared
// logits buffer), reserved apart from the headroom. A persistent entry is
// per-batch state alive through every moment (the penalty buffers), so
// the headroom adds it to the largest moment. An info entry is shown for
// comparison and never allocated by kvhost (the unpruned LM head).
const (
	MomentPrefill    = "prefill"
	MomentDecode     = "decode"
	MomentPersistent = "persistent"
	MomentStatic     = "static"
	MomentInfo       = "info"
)

// TensorPeak is one tensor of a moment: its bytes and what the caching
// allocator charges for it (budget.AllocatorBlock: 512 B rounding, or a
// whole segment when the remainder is too small to split; spec §6).
type TensorPeak struct {
	Name           string `json:"name"`
	Bytes          int64  `json:"bytes"`
	AllocatorBytes int64  `json:"allocator_bytes"`
}

// Moment is a set of tensors live together.
type Moment struct {
	Name           string       `json:"name"`
	Kind           string       `json:"kind"`
	Rows           int          `json:"rows"` // tokens (prefill) or sequences (decode)
	Tensors        []TensorPeak `json:"tensors"`
	Bytes          int64        `json:"bytes"`
	AllocatorBytes int64        `json:"allocator_bytes"`
}

func tensor(name string, n int64) TensorPeak {
	b, _, _ := budget.AllocatorBlock(n)
	return TensorPeak{Name: name, Bytes: n, AllocatorBytes: b}
}

func moment(name, kind string, rows int, ts ...TensorPeak) Moment {
	m := Moment{Name: name, Kind: kind, Rows: rows}
	for _, t := range ts {
		if t.Bytes <= 0 {
			continue
		}
		m.Tensors = append(m.Tensors, t)
		m.Bytes += t.Bytes
		m.AllocatorBytes += t.AllocatorBytes
	}
	return m
}

// peakShapes are the per-rank shapes of the runtime peaks: activations in
// bf16 (2 bytes), MLP and MoE widths and heads split over tensor
// parallelism, the vocabulary whole (the LM head all-gathers its logits).
type peakShapes struct {
	h, v, i, heads, kvHeads, headDim int
	moe                              *MoEShape
	moeN                             int // 2·moe_intermediate/tp (spec §4 "MoE")
	tp                               int
}

const actBytes = 2

func shapesOf(m HFModel, tp int) peakShapes {
	s := peakShapes{h: m.Hidden, v: m.Vocab, i: max(1, m.Intermediate/tp), heads: max(1, m.Heads/tp),
		kvHeads: max(1, m.KVHeads/tp), headDim: m.HeadDim, moe: m.MoE, tp: tp}
	if a := m.MLA; a != nil {
		// MLA prefill expands the latent to per-head K and V.
		s.kvHeads, s.headDim = s.heads, a.NopeDim+a.RopeDim
	}
	if s.moe != nil {
		s.moeN = 2 * s.moe.Intermediate / tp
	}
	return s
}

// layerMoment is the widest moment of one decoder layer over n rows:
// a dense layer's down-projection instant (budget.DenseLayerPeak's tensors)
// or, for a MoE model, the fused_moe cache beside the layer's [n,H] tensors.
func (s peakShapes) layerMoment(name, kind string, n int) Moment {
	th := int64(actBytes) * int64(n) * int64(s.h)
	if s.moe != nil {
		return moment(name, kind, n,
			tensor("layer input, residual, normed, output [n,H] ×4", 4*th),
			tensor("fused_moe cache", budget.MoECache(n, s.moe.TopK, s.moeN, s.h, actBytes)))
	}
	return moment(name, kind, n,
		tensor("layer input, residual, normed, down output [n,H] ×4", 4*th),
		tensor("gate_up [n,2I]", int64(actBytes)*int64(n)*2*int64(s.i)),
		tensor("activation [n,I]", int64(actBytes)*int64(n)*int64(s.i)))
}

// moePeakInput is kvhost's routed-experts feed-forward over rows tokens
// on one rank (expert widths split over tensor parallelism), in host/model's
// f32 activations and int32 routing indices.
func (s peakShapes) moePeakInput(rows int) budget.MoEPeakInput {
	e := s.moe
	return budget.MoEPeakInput{Rows: max(1, rows), Experts: e.Experts, TopK: e.TopK, Hidden: s.h, Inter: max(1, e.Intermediate/s.tp),
		Shared: e.Shared / s.tp, ElemBytes: 4, IndexBytes: 4}
}

// expertsMoment is kvhost's routed-experts moment over rows tokens
// (budget.MoEPeak), or nothing for a model without experts.
func (s peakShapes) expertsMoment(name, kind string, rows int) []Moment {
	if s.moe == nil {
		return nil
	}
	ts, _, err := budget.MoEPeak(s.moePeakInput(rows))
	if err != nil {
		return nil // a config without experts' shapes: ParseHFModel refuses it first
	}
	out := make([]TensorPeak, len(ts))
	for i, x := range ts {
		out[i] = tensor(x.Name, x.Bytes)
	}
	return []Moment{moment(name, kind, rows, out...)}
}

// lmHead is the LM head instant over rows rows (budget.LMHeadPeak's
// tensors): the hidden rows, the logits in bf16 and their FP32 copy.
func (s peakShapes) lmHead(name, kind string, rows int, extra ...TensorPeak) Moment {
	n := int64(rows) * int64(s.v)
	ts := []TensorPeak{
		tensor("hidden [rows,H]", int64(rows)*int64(s.h)*actBytes),
		tensor("logits bf16 [rows,V]", n*actBytes),
		tensor("logits FP32 [rows,V]", n*4),
	}
	return moment(name, kind, rows, append(ts, extra...)...)
}

// gpuMoments are the runtime moments of a GPU plan: prefill at the chunk
// limit (layer, attention, the pruned LM head for the requests in the
// chunk, one input-logprob chunk), decode of rows sequences (layer, LM
// head, sampling with its temporaries), the batch's penalty buffers live
// throughout, and the unpruned LM head for comparison.
func gpuMoments(s peakShapes, chunk, rows, logprobChunk int) []Moment {
	c := chunk
	pruned := max(1, min(rows, c))
	lp := min(c, max(1, logprobChunk))
	lpn := int64(lp) * int64(s.v)
	smp := budget.Sampling(rows, s.v)
	attn := budget.AttentionPeak(c, s.h, s.heads, s.kvHeads, s.headDim, actBytes)
	out := []Moment{
		s.layerMoment(fmt.Sprintf("prefill layer (%d tokens)", c), MomentPrefill, c),
		moment(fmt.Sprintf("prefill attention (%d tokens)", c), MomentPrefill, c,
			tensor("layer input, residual, normed, output [n,H] ×4", int64(4*actBytes)*int64(c)*int64(s.h)),
			tensor("qkv [n,(q+2kv)·hd]", attn-int64(4*actBytes)*int64(c)*int64(s.h))),
		s.lmHead(fmt.Sprintf("prefill LM head, pruned (%d rows)", pruned), MomentPrefill, pruned),
		moment(fmt.Sprintf("input logprobs, one chunk (%d rows)", lp), MomentPrefill, lp,
			tensor("logits bf16 [chunk,V]", lpn*actBytes),
			tensor("logits FP32 [chunk,V]", lpn*4),
			tensor("log-softmax FP32 [chunk,V]", lpn*4)),
		s.layerMoment(fmt.Sprintf("decode layer (%d rows)", rows), MomentDecode, rows),
		s.lmHead(fmt.Sprintf("decode LM head (%d rows)", rows), MomentDecode, rows),
		moment(fmt.Sprintf("sampling (%d rows)", rows), MomentDecode, rows,
			tensor("logits FP32 [rows,V]", int64(rows)*int64(s.v)*4),
			tensor("softmax temporary FP32 [rows,V]", smp.Softmax),
			tensor("top-k/top-p sort values FP32 [rows,V]", smp.SortValues),
			tensor("top-k/top-p sort indices int64 [rows,V]", smp.SortIndices),
			tensor("top-p cumsum FP32 [rows,V]", smp.CumSum)),
		moment(fmt.Sprintf("penalty buffers (%d rows)", rows), MomentPersistent, rows,
			tensor("frequency/presence accumulators [rows,V] FP32 ×2", budget.PenaltyBuffers(rows, s.v))),
		s.lmHead(fmt.Sprintf("LM head unpruned (%d rows; kvhost prunes)", c), MomentInfo, c),
	}
	out = append(out, s.expertsMoment(fmt.Sprintf("prefill routed experts (%d tokens)", c), MomentPrefill, c)...)
	return append(out, s.expertsMoment(fmt.Sprintf("decode routed experts (%d rows)", rows), MomentDecode, rows)...)
}

// graphMoments are the static graph memory of decode graphs captured up to
// maxBS rows (spec §4 "CUDA graphs"): the private pool holds about the
// largest bucket's peak (its layer and LM-head moments), and one FP32
// logits buffer of maxBS rows is shared by every bucket (V10).
func graphMoments(s peakShapes, maxBS int) (pool, shared Moment) {
	if maxBS <= 0 {
		return Moment{Kind: MomentStatic}, Moment{Kind: MomentStatic}
	}
	g := s.layerMoment("", MomentStatic, maxBS)
	lm := s.lmHead("", MomentStatic, maxBS)
	pool = moment(fmt.Sprintf("decode graph pool (captured at %d rows)", maxBS), MomentStatic, maxBS,
		tensor("layer moment", g.Bytes), tensor("LM head moment", lm.Bytes))
	shared = moment(fmt.Sprintf("graph-shared logits (%d rows)", maxBS), MomentStatic, maxBS,
		tensor("logits FP32 [max_bs,V]", budget.GraphSharedLogits(maxBS, s.v, 1)))
	return pool, shared
}

// liveMax is the largest prefill or decode moment as the allocator charges
// it, and its name.
func liveMax(ms []Moment) (int64, string) {
	var best int64
	name := ""
	for _, m := range ms {
		if (m.Kind == MomentPrefill || m.Kind == MomentDecode) && m.AllocatorBytes > best {
			best, name = m.AllocatorBytes, m.Name
		}
	}
	return best, name
}

// gpuHeadroom is kvhost's runtime headroom for a batch: the largest live
// moment plus the persistent per-batch state alive beside it, as the
// allocator charges them, and one large allocator segment for
// fragmentation (alloc.LargeBuffer).
func gpuHeadroom(ms []Moment) (peak, frag int64) {
	p, _ := liveMax(ms)
	for _, m := range ms {
		if m.Kind == MomentPersistent {
			p += m.AllocatorBytes
		}
	}
	return p, alloc.LargeBuffer
}

// momentsPeaks lists the moments as the report's flat peaks, largest first.
func momentsPeaks(ms []Moment) []Peak {
	out := make([]Peak, 0, len(ms))
	for _, m := range ms {
		out = append(out, Peak{Name: m.Name, Bytes: m.Bytes})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Bytes > out[j].Bytes })
	return out
}
