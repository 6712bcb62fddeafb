package model

import "strings"

// ExpertsPerToken is how many routed experts each token of a
// mixture-of-experts model uses and how many there are per MoE layer
// (Qwen3-MoE and DeepSeek, gpt-oss, Granite-4.0-H); 0, 0 for a dense
// model. A token reads used/experts of every stacked expert tensor.
func (c Config) ExpertsPerToken() (used, experts int) {
	if e := c.moe(); e != nil {
		return e.Router.TopK, e.Router.Experts
	}
	if s := SWAOf(c); s != nil && s.MoE != nil {
		return s.MoE.TopK, s.MoE.Experts
	}
	if h := c.Hybrid(); h != nil && h.Experts > 0 {
		return h.ExpertsUsed, h.Experts
	}
	return 0, 0
}

// TokenReadBytes is how many of a loaded tensor's bytes one decoded token
// reads (batch 1): one row of the token embedding (all of it again when
// tied, the LM head being that matrix), used/experts of a stacked expert
// tensor (a token runs its top-k; each expert's rows are contiguous), the
// whole of any other tensor.
func (c Config) TokenReadBytes(name string, bytes int64, tied bool) int64 {
	used, experts := c.ExpertsPerToken()
	switch {
	case name == "token_embd.weight":
		row := bytes / int64(max(1, c.Vocab))
		if tied {
			return row + bytes
		}
		return row
	case experts > 0 && strings.Contains(name, "_exps."):
		return bytes / int64(experts) * int64(used)
	}
	return bytes
}
