package budget

// MoEPeakInput is one routed-experts feed-forward over Rows tokens: Experts
// experts of width Inter, TopK chosen per token, Shared the shared experts'
// total width (0: none), Hidden the residual width. ElemBytes is the bytes
// of one activation element (kvhost's forward keeps activations in f32: 4)
// and IndexBytes of one routing index (int32: 4).
type MoEPeakInput struct {
	Rows, Experts, TopK, Hidden, Inter, Shared int
	ElemBytes, IndexBytes                      int
}

// Validate reports the first field outside its allowed range.
func (in MoEPeakInput) Validate() error {
	switch {
	case in.Rows < 1:
		return invalid("MoEPeakInput.Rows", in.Rows, ">= 1")
	case in.Experts < 1:
		return invalid("MoEPeakInput.Experts", in.Experts, ">= 1")
	case in.TopK < 1 || in.TopK > in.Experts:
		return invalid("MoEPeakInput.TopK", in.TopK, "1..Experts")
	case in.Hidden < 1:
		return invalid("MoEPeakInput.Hidden", in.Hidden, ">= 1")
	case in.Inter < 1:
		return invalid("MoEPeakInput.Inter", in.Inter, ">= 1")
	case in.Shared < 0:
		return invalid("MoEPeakInput.Shared", in.Shared, ">= 0")
	case in.ElemBytes < 1:
		return invalid("MoEPeakInput.ElemBytes", in.ElemBytes, ">= 1")
	case in.IndexBytes < 1:
		return invalid("MoEPeakInput.IndexBytes", in.IndexBytes, ">= 1")
	}
	return nil
}

// MoETensor is one tensor of the routed-experts moment.
type MoETensor struct {
	Name  string
	Bytes int64
}

// MoEPeak is the widest instant of a routed-experts feed-forward over
// rows tokens in kvhost's grouped form (gather, grouped GEMM, scatter),
// the moment spec §4 "MoE" gives for SGLang's fused_moe. With n = rows·k
// routed rows, every tensor live at once:
//
//	[rows,H] ×2           the residual stream and the layer's normed rows
//	offsets [E+1], tokens, slots [n] (index), weights [n]   the grouping
//	gathered rows [n,H]   (reused for the down-projection's output)
//	gate, up [n,I]        the experts' SwiGLU inputs
//
// which outlasts the routing instant ([rows,E] router logits in f32 with
// the ids and weights [n]) and the shared experts' ([rows,S] ×2 beside the
// gathered rows). The peak is the largest of the three instants, so the
// expert width enters as routed tokens × moe_intermediate_size; router
// logits win only for very wide routers (E > k·(H + 2·I) at 4-byte activations).
// The CPU plan's dry run measures the same instants through the real
// forward; host/plan's TestMoEPeakMatchesDryRun checks the two. DeepSeek-
// V2-Lite at an 8192-token chunk in f32: 1 091 109 124 B.
func MoEPeak(in MoEPeakInput) ([]MoETensor, int64, error) {
	if err := in.Validate(); err != nil {
		return nil, 0, err
	}
	e, ix := int64(in.ElemBytes), int64(in.IndexBytes)
	rows, n := int64(in.Rows), int64(in.Rows)*int64(in.TopK)
	h, inter, experts := int64(in.Hidden), int64(in.Inter), int64(in.Experts)
	stream := []MoETensor{{"residual [rows,H]", rows * h * e}, {"normed [rows,H]", rows * h * e}}
	group := []MoETensor{{"expert offsets [E+1]", (experts + 1) * ix}, {"grouped token ids [n]", n * ix}, {"grouped slots [n]", n * ix},
		{"grouped weights [n]", n * e}}
	route := append(append([]MoETensor{}, stream...), MoETensor{"router logits f32 [rows,E]", rows * experts * 4},
		MoETensor{"expert ids [n]", n * ix}, MoETensor{"expert weights [n]", n * e})
	regroup := append(append(append([]MoETensor{}, stream...), route[3:]...), group...)
	gathered := MoETensor{"gathered rows [n,H]", n * h * e}
	experts3 := append(append(append([]MoETensor{}, stream...), group...), gathered,
		MoETensor{"expert gate [n,I]", n * inter * e}, MoETensor{"expert up [n,I]", n * inter * e})
	moments := [][]MoETensor{route, regroup, experts3}
	if in.Shared > 0 {
		s := int64(in.Shared)
		moments = append(moments, append(append(append([]MoETensor{}, stream...), group...), gathered,
			MoETensor{"shared gate [rows,S]", rows * s * e}, MoETensor{"shared up [rows,S]", rows * s * e}))
	}
	var best []MoETensor
	var peak int64
	for _, m := range moments {
		var sum int64
		for _, t := range m {
			sum += t.Bytes
		}
		if sum > peak {
			best, peak = m, sum
		}
	}
	return best, peak, nil
}
