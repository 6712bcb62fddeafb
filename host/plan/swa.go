package plan

import "github.com/kvhost/kvhost/host/model"

// slidingConfigJSON adds a sliding-window model's keys to its config.json
// equivalent: the window and the per-layer pattern the swa configurator
// assigns pools by, and gpt-oss's experts (HFModel's MoE peaks).
func slidingConfigJSON(m map[string]any, s *model.SWAConfig) {
	m["sliding_window"] = s.Window
	types := make([]string, len(s.Sliding))
	for i, sl := range s.Sliding {
		types[i] = "full_attention"
		if sl {
			types[i] = "sliding_attention"
		}
	}
	m["layer_types"] = types
	if e := s.MoE; e != nil {
		m["num_local_experts"], m["num_experts_per_tok"] = e.Experts, e.TopK
	}
}
