package sampling

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/kvhost/kvhost/sdk/sampler"
)

// ErrUnknownPolicy matches (errors.Is) a request for a policy that is not
// loaded.
var ErrUnknownPolicy = errors.New("sampling: unknown sampler")

// ParamError is a request parameter the chosen policy does not accept: a
// client error (HTTP 400) naming the parameter. FromRequest says the value
// came from the request's own field of that name (temperature, top_p,
// frequency_penalty, logit_bias, ...) rather than from the policy
// parameters ("sampler_params"), so the server can name the field the
// client wrote.
type ParamError struct {
	Policy      string
	Param       string
	Problem     string
	FromRequest bool
}

func (e *ParamError) Error() string {
	return fmt.Sprintf("sampling: sampler %q: parameter %q: %s", e.Policy, e.Param, e.Problem)
}

// UnknownPolicyError names a policy that is not loaded and those that are.
type UnknownPolicyError struct {
	Policy    string
	Available []string
}

func (e *UnknownPolicyError) Error() string {
	return fmt.Sprintf("sampling: unknown sampler %q (loaded: %s)", e.Policy, strings.Join(e.Available, ", "))
}

func (e *UnknownPolicyError) Is(target error) bool { return target == ErrUnknownPolicy }

// preOps are the host pre-ops a policy declared.
type preOps struct {
	penalties, bias, temperature, topK, topP, minP bool
}

// hostParams are the values the host pre-ops read.
type hostParams struct {
	repetition, frequency, presence float32
	temperature, topP, minP         float32
	topK                            int
}

// schema is a policy version's parameter schema, shared by versions with
// the same preops and params (key).
type schema struct {
	key    uint64
	ops    preOps
	argmax bool            // the policy declared itself argmax-invariant
	all    []sampler.Param // host pre-op params, then the guest's
	nGuest int
	index  map[string]int
}

func newSchema(d sampler.Descriptor) *schema {
	s := &schema{index: map[string]int{}, argmax: d.ArgmaxInvariant}
	for _, op := range sampler.PreOpOrder {
		if !slices.Contains(d.PreOps, op) {
			continue
		}
		switch op {
		case sampler.PreOpPenalties:
			s.ops.penalties = true
		case sampler.PreOpBias:
			s.ops.bias = true
		case sampler.PreOpTemperature:
			s.ops.temperature = true
		case sampler.PreOpTopK:
			s.ops.topK = true
		case sampler.PreOpTopP:
			s.ops.topP = true
		case sampler.PreOpMinP:
			s.ops.minP = true
		}
		s.all = append(s.all, sampler.PreOpParams[op]...)
	}
	s.all = append(s.all, d.Params...)
	s.nGuest = len(d.Params)
	for i, p := range s.all {
		s.index[p.Name] = i
	}
	h := fnv.New64a()
	b, _ := json.Marshal(struct {
		P []string
		Q []sampler.Param
	}{d.PreOps, d.Params})
	h.Write(b)
	s.key = h.Sum64()
	return s
}

// Compiled is a request's validated parameters for one policy. The zero
// value means the default policy with default parameters. It caches the
// resolved vectors for the schema it was last used with, so a step
// resolves nothing unless the policy's schema changed in a swap.
type Compiled struct {
	policy string
	values map[string]float64
	key    uint64
	host   hostParams
	guest  []float32
}

// Policy is the policy name ("" means the registry's default).
func (c Compiled) Policy() string { return c.policy }

// Values returns the parameters the request gave (a copy).
func (c Compiled) Values() map[string]float64 {
	out := make(map[string]float64, len(c.values))
	for k, v := range c.values {
		out[k] = v
	}
	return out
}

// validate checks params against s and returns the numeric values.
func (s *schema) validate(policy string, params map[string]any) (map[string]float64, error) {
	names := make([]string, 0, len(params))
	for n := range params {
		names = append(names, n)
	}
	sort.Strings(names) // report the first bad one deterministically
	values := make(map[string]float64, len(params))
	for _, n := range names {
		i, ok := s.index[n]
		if !ok {
			return nil, &ParamError{Policy: policy, Param: n, Problem: "unknown; this sampler takes " + s.names()}
		}
		p := s.all[i]
		v, ok := number(params[n])
		if !ok {
			return nil, &ParamError{Policy: policy, Param: n, Problem: fmt.Sprintf("want a number, got %T", params[n])}
		}
		if p.Type == sampler.TypeInt && v != math.Trunc(v) {
			return nil, &ParamError{Policy: policy, Param: n, Problem: fmt.Sprintf("want an integer, got %v", v)}
		}
		if !(v >= p.Min && v <= p.Max) {
			return nil, &ParamError{Policy: policy, Param: n, Problem: fmt.Sprintf("%v out of range [%v, %v]", v, p.Min, p.Max)}
		}
		values[n] = v
	}
	return values, nil
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case int64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

// resolve fills c's cached vectors for schema s: given values (clamped
// into range, in case a swap narrowed it), defaults for the rest.
func (c *Compiled) resolve(s *schema) {
	get := func(name string) float64 {
		i, ok := s.index[name]
		if !ok {
			return 0
		}
		p := s.all[i]
		if v, ok := c.values[name]; ok {
			return math.Min(math.Max(v, p.Min), p.Max)
		}
		return p.Default
	}
	c.host = hostParams{repetition: 1, topP: 1, temperature: 1}
	if s.ops.penalties {
		c.host.repetition = float32(get("repetition_penalty"))
		c.host.frequency = float32(get("frequency_penalty"))
		c.host.presence = float32(get("presence_penalty"))
	}
	if s.ops.temperature {
		c.host.temperature = float32(get("temperature"))
	}
	if s.ops.topK {
		c.host.topK = int(get("top_k"))
	}
	if s.ops.topP {
		c.host.topP = float32(get("top_p"))
	}
	if s.ops.minP {
		c.host.minP = float32(get("min_p"))
	}
	if cap(c.guest) < s.nGuest {
		c.guest = make([]float32, s.nGuest)
	}
	c.guest = c.guest[:s.nGuest]
	for i, p := range s.all[len(s.all)-s.nGuest:] {
		c.guest[i] = float32(get(p.Name))
	}
	c.key = s.key
}
