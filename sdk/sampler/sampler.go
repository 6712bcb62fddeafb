package sampler

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
)

// ABIVersion is the sampler ABI version; kvhost_abi_version returns it.
const ABIVersion = 1

// Kind is the descriptor kind of a sampler.
const Kind = "sampler"

// Exports of a sampler module (besides kvhost_abi_version and
// kvhost_describe, shared with configurators).
const (
	// ExportInit: (max_batch i32, max_k i32) -> i32, the I/O header's
	// address (0: failure). Called once per instance.
	ExportInit = "kvhost_sampler_init"
	// ExportSample: (batch i32, k i32) -> i32 status (0 ok, negative: the
	// step failed). Rows have stride k.
	ExportSample = "kvhost_sample"
)

// Limits.
const (
	MaxCandidates     = 1024
	MaxParams         = 32
	MaxState          = 64
	MaxHistory        = 4096
	MaxDescriptorSize = 64 << 10
)

// IOMagic is the first u32 of the I/O header ("KVS1").
const IOMagic = 0x3153564B

// Field indices of the I/O header, an array of HeaderWords little-endian
// u32: six counts, then twelve addresses in linear memory.
const (
	HdrMagic = iota
	HdrMaxBatch
	HdrMaxK
	HdrNParams
	HdrNState
	HdrNHistory
	HdrParams     // f32[max_batch*n_params]
	HdrSeed       // u64[max_batch]
	HdrStep       // u64[max_batch]
	HdrNCand      // i32[max_batch]
	HdrIDs        // i32[max_batch*max_k]
	HdrLogits     // f32[max_batch*max_k]
	HdrLogprobs   // f32[max_batch*max_k]
	HdrHistory    // i32[max_batch*n_history]
	HdrHistoryLen // i32[max_batch]
	HdrState      // f32[max_batch*n_state]
	HdrOutID      // i32[max_batch]
	HdrOutLogprob // f32[max_batch]
	HeaderWords   // 18
)

// Host pre-ops a policy can ask for, applied in this order before the cut
// to its candidates.
const (
	PreOpPenalties   = "penalties"   // repetition (prompt and output), frequency and presence (output) penalties
	PreOpBias        = "bias"        // the request's logit bias
	PreOpTemperature = "temperature" // logits / temperature (0: keep only the best)
	PreOpTopK        = "top_k"
	PreOpTopP        = "top_p"
	PreOpMinP        = "min_p"
)

// Param types.
const (
	TypeFloat = "float"
	TypeInt   = "int"
)

// Param is one entry of a parameter schema.
type Param struct {
	Name    string  `json:"name"`
	Type    string  `json:"type"`
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Default float64 `json:"default"`
}

// PreOpParams lists the parameters each host pre-op reads. They belong to
// the request's schema when the policy declares the pre-op, and are never
// passed to the guest.
var PreOpParams = map[string][]Param{
	PreOpPenalties: {
		{Name: "repetition_penalty", Type: TypeFloat, Min: 0.01, Max: 10, Default: 1},
		{Name: "frequency_penalty", Type: TypeFloat, Min: -2, Max: 2, Default: 0},
		{Name: "presence_penalty", Type: TypeFloat, Min: -2, Max: 2, Default: 0},
	},
	PreOpBias:        nil,
	PreOpTemperature: {{Name: "temperature", Type: TypeFloat, Min: 0, Max: 2, Default: 1}},
	PreOpTopK:        {{Name: "top_k", Type: TypeInt, Min: 0, Max: MaxCandidates, Default: 0}},
	PreOpTopP:        {{Name: "top_p", Type: TypeFloat, Min: 0, Max: 1, Default: 1}},
	PreOpMinP:        {{Name: "min_p", Type: TypeFloat, Min: 0, Max: 1, Default: 0}},
}

// PreOpOrder is the order the host applies pre-ops in.
var PreOpOrder = []string{PreOpPenalties, PreOpBias, PreOpTemperature, PreOpTopK, PreOpTopP, PreOpMinP}

// Descriptor is the JSON kvhost_describe returns.
type Descriptor struct {
	ABI     int    `json:"abi"`
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Candidates is K: how many top candidates the host passes per row.
	Candidates int `json:"candidates"`
	// ArgmaxInvariant declares the policy always picks the best candidate.
	ArgmaxInvariant bool `json:"argmax_invariant"`
	// State is how many f32 of per-sequence state the host keeps for the
	// policy (zero at a sequence's first step); History how many of the
	// last generated tokens it passes.
	State   int      `json:"state,omitempty"`
	History int      `json:"history,omitempty"`
	PreOps  []string `json:"preops"`
	Params  []Param  `json:"params"`
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// ValidName reports whether s is a valid policy or parameter name:
// lowercase letters, digits, '.', '_' and '-', 1–64 bytes, not starting
// with a punctuation character (so never a path).
func ValidName(s string) bool { return nameRE.MatchString(s) }

// ParseDescriptor decodes and validates a descriptor; unknown fields are
// errors (they are usually typos).
func ParseDescriptor(b []byte) (Descriptor, error) {
	var d Descriptor
	if len(b) > MaxDescriptorSize {
		return d, fmt.Errorf("sampler: descriptor is %d bytes, over the %d limit", len(b), MaxDescriptorSize)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return d, fmt.Errorf("sampler: descriptor: %w", err)
	}
	return d, d.Validate()
}

// Validate names the first invalid field.
func (d Descriptor) Validate() error {
	switch {
	case d.ABI != ABIVersion:
		return fmt.Errorf("sampler: descriptor abi %d: this host speaks %d", d.ABI, ABIVersion)
	case d.Kind != Kind:
		return fmt.Errorf("sampler: descriptor kind %q: want %q", d.Kind, Kind)
	case !ValidName(d.Name):
		return fmt.Errorf("sampler: descriptor name %q: want %s", d.Name, nameRE)
	case d.Version == "" || len(d.Version) > 64:
		return fmt.Errorf("sampler: descriptor version %q: want 1–64 bytes", d.Version)
	case d.Candidates < 1 || d.Candidates > MaxCandidates:
		return fmt.Errorf("sampler: descriptor candidates %d: want 1..%d", d.Candidates, MaxCandidates)
	case d.State < 0 || d.State > MaxState:
		return fmt.Errorf("sampler: descriptor state %d: want 0..%d", d.State, MaxState)
	case d.History < 0 || d.History > MaxHistory:
		return fmt.Errorf("sampler: descriptor history %d: want 0..%d", d.History, MaxHistory)
	case len(d.Params) > MaxParams:
		return fmt.Errorf("sampler: descriptor has %d params, over %d", len(d.Params), MaxParams)
	}
	taken := map[string]string{}
	for _, op := range d.PreOps {
		ps, ok := PreOpParams[op]
		if !ok {
			return fmt.Errorf("sampler: descriptor preop %q: want one of %v", op, PreOpOrder)
		}
		if _, dup := taken["preop:"+op]; dup {
			return fmt.Errorf("sampler: descriptor preop %q listed twice", op)
		}
		taken["preop:"+op] = op
		for _, p := range ps {
			taken[p.Name] = "host pre-op " + op
		}
	}
	for _, p := range d.Params {
		if err := p.validate(); err != nil {
			return err
		}
		if by, dup := taken[p.Name]; dup {
			return fmt.Errorf("sampler: descriptor param %q is already defined by %s", p.Name, by)
		}
		taken[p.Name] = "the policy"
	}
	return nil
}

func (p Param) validate() error {
	if !ValidName(p.Name) {
		return fmt.Errorf("sampler: param name %q: want %s", p.Name, nameRE)
	}
	if p.Type != TypeFloat && p.Type != TypeInt {
		return fmt.Errorf("sampler: param %q type %q: want %q or %q", p.Name, p.Type, TypeFloat, TypeInt)
	}
	for _, v := range []float64{p.Min, p.Max, p.Default} {
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > 1<<24 {
			return fmt.Errorf("sampler: param %q bounds must be finite and within ±2^24", p.Name)
		}
		if p.Type == TypeInt && v != math.Trunc(v) {
			return fmt.Errorf("sampler: param %q is an int but %v is not", p.Name, v)
		}
	}
	if !(p.Min <= p.Default && p.Default <= p.Max) {
		return fmt.Errorf("sampler: param %q default %v outside [%v, %v]", p.Name, p.Default, p.Min, p.Max)
	}
	return nil
}

// Rand returns a uniform float64 in [0, 1) for (seed, step, stream); it
// depends on nothing else, so seeded runs do not depend on batch
// composition. Stream 0 is the draw a policy samples with.
func Rand(seed, step, stream uint64) float64 {
	z := seed ^ (step+1)*0x9e3779b97f4a7c15 ^ stream*0xd1b54a32d192ed03
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}
