package plan

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestParseHFModelReadsTF5Spellings: a published config rewritten as
// transformers ≥ 5 saves it (torch_dtype as dtype, rope_theta and
// rope_scaling inside rope_parameters) gives the GPU plan the same model,
// weight bytes (which follow the dtype) included.
func TestParseHFModelReadsTF5Spellings(t *testing.T) {
	for _, name := range []string{"llama-3-8b", "gemma-3-12b-it", "deepseek-v3"} {
		raw, err := os.ReadFile(filepath.Join(configDir, name+".json"))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		for _, o := range []map[string]any{m, mapOf(m["text_config"])} {
			if o == nil {
				continue
			}
			if d, ok := o["torch_dtype"]; ok {
				o["dtype"] = d
				delete(o, "torch_dtype")
			}
			p := map[string]any{"rope_type": "default"}
			if rs := mapOf(o["rope_scaling"]); rs != nil {
				p = rs
			}
			if th, ok := o["rope_theta"]; ok {
				p["rope_theta"] = th
			}
			delete(o, "rope_theta")
			delete(o, "rope_scaling")
			o["rope_parameters"] = p
		}
		v5, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ParseHFModel(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ParseHFModel(v5)
		if err != nil {
			t.Fatal(err)
		}
		want.raw, got.raw = nil, nil
		if want.DType == "" || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: transformers 5 spelling %+v, original %+v", name, got, want)
		}
	}
}

func mapOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}
