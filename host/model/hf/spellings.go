package hf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// One config.json, several spellings. Normalize (and Spellings, its part
// without the wrapper) rewrites a config.json into the one spelling every
// reader parses (Config here, the architectures' own structs in host/model,
// host/plan's fields), so no reader knows the others:
//
//   - transformers ≥ 5 moves rope_theta and rope_scaling into
//     rope_parameters: one object {"rope_type": "yarn", "factor": 4,
//     "rope_theta": 1e6, …}, or one per attention layer type for models
//     with local and global layers (Gemma 3: {"full_attention": {…},
//     "sliding_attention": {…}}). The flat object (or full_attention's)
//     becomes rope_theta, partial_rotary_factor and — when its rope_type is
//     not "default" — rope_scaling; sliding_attention's rope_theta becomes
//     rope_local_base_freq (Gemma 3's name for it), and its rope_type must be
//     "default": no architecture kvhost serves scales the local layers.
//   - transformers ≥ 5 writes torch_dtype as dtype.
//   - a multimodal wrapper (architectures[0] ends in ForConditionalGeneration,
//     e.g. Gemma3ForConditionalGeneration) nests its language model's config
//     under text_config: that object is the config, the wrapper's own keys
//     (architectures, eos_token_id, torch_dtype, vision_config) filling the
//     ones it lacks.
//
// A key given in both spellings must agree; the error names both.

// Normalized is a config.json in the one spelling.
type Normalized struct {
	JSON []byte
	// Wrapper is the multimodal wrapper class whose text_config JSON is,
	// "" for a plain language model.
	Wrapper string
	// Vision reports the wrapper's vision_config: a vision tower kvhost
	// does not load.
	Vision bool
}

type object map[string]json.RawMessage

func isNull(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

func parseObject(raw []byte, what string) (object, error) {
	var o object
	if err := json.Unmarshal(PythonJSON(raw), &o); err != nil {
		return nil, fmt.Errorf("hf: config.json: %s: %w", what, err)
	}
	if o == nil {
		return nil, fmt.Errorf("hf: config.json: %s: want a JSON object", what)
	}
	return o, nil
}

// Normalize returns raw in the one spelling; raw itself when it already is.
func Normalize(raw []byte) (Normalized, error) {
	o, err := parseObject(raw, "config")
	if err != nil {
		return Normalized{}, err
	}
	var n Normalized
	var arch []string
	_ = json.Unmarshal(o["architectures"], &arch)
	if tc, ok := o["text_config"]; ok && !isNull(tc) && len(arch) > 0 && strings.HasSuffix(arch[0], "ForConditionalGeneration") {
		t, err := parseObject(tc, "text_config")
		if err != nil {
			return Normalized{}, err
		}
		for k, v := range o {
			if _, ok := t[k]; !ok && k != "text_config" {
				t[k] = v
			}
		}
		n.Wrapper, n.Vision = arch[0], !isNull(o["vision_config"])
		o = t
	}
	changed, err := o.spellings()
	if err != nil {
		return Normalized{}, err
	}
	if !changed && n.Wrapper == "" {
		n.JSON = raw
		return n, nil
	}
	n.JSON, err = json.Marshal(o)
	return n, err
}

// Spellings is Normalize's rewriting of rope_parameters and dtype alone,
// for readers that unwrap text_config themselves (host/plan).
func Spellings(raw []byte) ([]byte, error) {
	o, err := parseObject(raw, "config")
	if err != nil {
		return nil, err
	}
	changed, err := o.spellings()
	if err != nil || !changed {
		return raw, err
	}
	return json.Marshal(o)
}

// spellings rewrites o's transformers-5 keys in place; changed says
// whether there were any.
func (o object) spellings() (changed bool, err error) {
	if d, ok := o["dtype"]; ok {
		delete(o, "dtype")
		if !isNull(d) {
			if err := o.merge("torch_dtype", d, "dtype"); err != nil {
				return false, err
			}
		}
		changed = true
	}
	rp, ok := o["rope_parameters"]
	if !ok {
		return changed, nil
	}
	delete(o, "rope_parameters")
	if isNull(rp) {
		return true, nil
	}
	p, err := parseObject(rp, "rope_parameters")
	if err != nil {
		return false, err
	}
	_, full := p["full_attention"]
	_, sliding := p["sliding_attention"]
	if !full && !sliding {
		return true, o.rope(p, "rope_parameters")
	}
	for k := range p {
		if k != "full_attention" && k != "sliding_attention" {
			return false, fmt.Errorf("hf: config.json: rope_parameters.%s: layer type not supported (full_attention, sliding_attention)", k)
		}
	}
	if full {
		fp, err := parseObject(p["full_attention"], "rope_parameters.full_attention")
		if err != nil {
			return false, err
		}
		if err := o.rope(fp, "rope_parameters.full_attention"); err != nil {
			return false, err
		}
	}
	if sliding {
		sp, err := parseObject(p["sliding_attention"], "rope_parameters.sliding_attention")
		if err != nil {
			return false, err
		}
		if t := ropeType(sp); t != "" && t != "default" {
			return false, fmt.Errorf("hf: config.json: rope_parameters.sliding_attention.rope_type %q: the sliding layers' rope must be \"default\" (unscaled)", t)
		}
		if th, ok := sp["rope_theta"]; ok {
			if err := o.merge("rope_local_base_freq", th, "rope_parameters.sliding_attention.rope_theta"); err != nil {
				return false, err
			}
		}
	}
	return true, nil
}

// rope spells one rope_parameters object p (named field) the old way.
func (o object) rope(p object, field string) error {
	for _, k := range []string{"rope_theta", "partial_rotary_factor"} {
		if v, ok := p[k]; ok {
			if err := o.merge(k, v, field+"."+k); err != nil {
				return err
			}
		}
	}
	if t := ropeType(p); t == "" || t == "default" {
		return nil
	}
	b, err := json.Marshal(scalingOf(p))
	if err != nil {
		return err
	}
	return o.merge("rope_scaling", b, field)
}

// ropeType is an object's rope_type, or its legacy type.
func ropeType(p object) string {
	var t string
	if err := json.Unmarshal(p["rope_type"], &t); err != nil || t == "" {
		_ = json.Unmarshal(p["type"], &t)
	}
	return t
}

// scalingOf is p as a rope_scaling object: rope_type spelled so, without
// the keys that live beside rope_scaling.
func scalingOf(p object) object {
	s := object{}
	for k, v := range p {
		switch k {
		case "rope_theta", "partial_rotary_factor":
		case "type":
			if _, ok := p["rope_type"]; !ok {
				s["rope_type"] = v
			}
		default:
			s[k] = v
		}
	}
	return s
}

// merge sets o[key] to v (from the field named from) unless o holds a
// different value for it already.
func (o object) merge(key string, v json.RawMessage, from string) error {
	old, ok := o[key]
	if !ok || isNull(old) {
		o[key] = v
		return nil
	}
	var a, b any
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(v, &b) != nil {
		return fmt.Errorf("hf: config.json: %s = %s and %s = %s cannot be compared", key, compact(old), from, compact(v))
	}
	if key == "rope_scaling" {
		if m, err := parseObject(old, key); err == nil {
			_ = json.Unmarshal(mustJSON(scalingOf(m)), &a)
		}
	}
	if !reflect.DeepEqual(a, b) {
		return fmt.Errorf("hf: config.json: %s = %s and %s = %s disagree", key, compact(old), from, compact(v))
	}
	return nil
}

func compact(v json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, v) != nil {
		return string(v)
	}
	return b.String()
}

func mustJSON(o object) []byte {
	b, _ := json.Marshal(o)
	return b
}

// WithDefaults adds to config.json the keys of defs it lacks (or holds as
// null): an architecture's transformers defaults, for the published
// configs that leave them out (Gemma 3's text_config).
func WithDefaults(raw []byte, defs map[string]any) ([]byte, error) {
	o, err := parseObject(raw, "config")
	if err != nil {
		return nil, err
	}
	for k, v := range defs {
		if !isNull(o[k]) {
			continue
		}
		if o[k], err = json.Marshal(v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(o)
}
