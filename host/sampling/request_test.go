package sampling

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/sdk/sampler"
)

// refAdjust is the package doc's penalty and bias rules written plainly in
// float64 over the whole vocabulary: the repetition penalty on every token
// of the prompt or of the output (divide a positive logit, multiply a
// negative one), frequency × count + presence subtracted for every token
// of the output, then the bias added. Ids outside the vocabulary are
// ignored.
func refAdjust(row []float32, prompt, generated []int32, rep, freq, pres float64, bias map[int32]float64) []float64 {
	count := map[int32]int{}
	for _, g := range generated {
		count[g]++
	}
	inPrompt := map[int32]bool{}
	for _, p := range prompt {
		inPrompt[p] = true
	}
	out := make([]float64, len(row))
	for i, l := range row {
		id, v := int32(i), float64(l)
		if rep != 1 && (inPrompt[id] || count[id] > 0) {
			if v > 0 {
				v /= rep
			} else {
				v *= rep
			}
		}
		if c := count[id]; c > 0 {
			v -= float64(c)*freq + pres
		}
		out[i] = v + bias[id]
	}
	return out
}

// adjusted is what the host pre-ops make of row: row itself where adjust
// touched nothing.
func adjusted(row []float32, seq *SeqState) []float32 {
	var rs rowScratch
	out := append([]float32(nil), row...)
	for _, t := range rs.adjust(row, seq, &seq.Params.host, true, true) {
		out[t.id] = t.v
	}
	return out
}

type penaltyCase struct {
	name            string
	rep, freq, pres float64
	prompt, gen     []int32
	bias            map[int32]float64
}

var penaltyCases = []penaltyCase{
	{name: "frequency counts output only", freq: 0.7, prompt: []int32{3, 5, 5}, gen: []int32{3, 3, 3, 9}},
	{name: "presence once per token", pres: 1.2, prompt: []int32{7}, gen: []int32{4, 4, 8}},
	{name: "negative penalties reward", freq: -0.5, pres: -1, gen: []int32{1, 2, 2}},
	{name: "repetition over prompt and output", rep: 1.3, prompt: []int32{0, 2, 2, 11, 40}, gen: []int32{2, 6, 12}},
	{name: "repetition below 1 boosts", rep: 0.8, prompt: []int32{1, 13}, gen: []int32{13, 14}},
	{name: "repetition alone ignores an empty output", rep: 2, prompt: []int32{5, 6}},
	{name: "all with bias", rep: 1.15, freq: 0.4, pres: 0.3, prompt: []int32{20, 21, 22, 3}, gen: []int32{3, 3, 21, 30, -1, 4000},
		bias: map[int32]float64{3: 2, 20: -100, 25: 100, 64: 0.5, 5000: 7}},
	{name: "bias only", bias: map[int32]float64{0: -100, 63: 100}},
}

func (c penaltyCase) request() Request {
	r := Request{Temperature: 0, FrequencyPenalty: float32(c.freq), PresencePenalty: float32(c.pres), RepetitionPenalty: float32(c.rep)}
	m := map[int32]float32{}
	for t, b := range c.bias {
		m[t] = float32(b)
	}
	r.LogitBias = NormalizeBias(m)
	return r
}

// TestPenaltiesMatchReference: every penalty, alone and together, adjusts
// exactly the tokens the reference adjusts, by the reference's amount.
func TestPenaltiesMatchReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 3))
	for _, c := range penaltyCases {
		t.Run(c.name, func(t *testing.T) {
			row := make([]float32, 64)
			for i := range row {
				row[i] = float32(rng.NormFloat64() * 4)
			}
			row[2], row[6] = 0, -3 // zero and negative logits under repetition
			seq := NewSeqState(c.request(), nil, c.prompt, 1)
			seq.Generated = c.gen
			rep := c.rep
			if rep == 0 {
				rep = 1
			}
			want := refAdjust(row, c.prompt, c.gen, rep, c.freq, c.pres, c.bias)
			got := adjusted(row, &seq)
			for i := range row {
				if d := math.Abs(float64(got[i]) - want[i]); d > 1e-5*math.Max(1, math.Abs(want[i])) {
					t.Fatalf("token %d: %v, reference %v (raw %v)", i, got[i], want[i], row[i])
				}
			}
		})
	}
}

// TestSampleSeqHonoursPenalties: the host sampler (the engine's path for
// greedy requests and for hosts without policies) chooses from the
// adjusted logits: greedy is the reference's argmax, and a sampled token
// is the one Sample draws from the adjusted row with the same stream.
func TestSampleSeqHonoursPenalties(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	row := make([]float32, 500)
	for i := range row {
		row[i] = float32(rng.NormFloat64() * 2)
	}
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	cases := append([]penaltyCase{
		{name: "bias -100 on the argmax", bias: map[int32]float64{int32(best): -100}},
		{name: "bias +100 forces a token", bias: map[int32]float64{77: 100}},
		{name: "frequency on the argmax", freq: 2, gen: []int32{int32(best), int32(best)}},
		{name: "repetition on the argmax from the prompt", rep: 10, prompt: []int32{int32(best)}},
	}, penaltyCases...)
	var s Sampler
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := c.rep
			if rep == 0 {
				rep = 1
			}
			ref := refAdjust(row, c.prompt, c.gen, rep, c.freq, c.pres, c.bias)
			argmax := 0
			for i, v := range ref {
				if v > ref[argmax] {
					argmax = i
				}
			}
			req := c.request()
			seq := NewSeqState(req, nil, c.prompt, 9)
			seq.Generated = c.gen
			if got := s.SampleSeq(row, &seq); got != int32(argmax) {
				t.Fatalf("greedy chose %d, reference argmax %d", got, argmax)
			}
			if strings.HasPrefix(c.name, "bias -100") && argmax == best || strings.HasPrefix(c.name, "bias +100") && argmax != 77 {
				t.Fatalf("the case does not move the argmax (%d)", argmax)
			}
			// Sampled: the same draw as Sample over the adjusted row.
			req.Temperature, req.TopK, req.TopP, req.MinP = 0.8, 40, 0.95, 0.01
			seq = NewSeqState(req, nil, c.prompt, 0)
			seq.Generated = c.gen
			adj := adjusted(row, &seq)
			p := Params{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.01}
			for step := range uint64(200) {
				seq.Seed, seq.Step = step*31, step
				if got, want := s.SampleSeq(row, &seq), s.Sample(adj, p, seq.Seed, step); got != want {
					t.Fatalf("step %d: sampled %d, %d from the adjusted row", step, got, want)
				}
			}
		})
	}
	// The row itself is never modified.
	sum := 0.0
	for _, v := range row {
		sum += float64(v)
	}
	var s2 Sampler
	seq := NewSeqState(Request{RepetitionPenalty: 3, LogitBias: []TokenBias{{1, 50}}}, nil, []int32{1, 2, 3}, 0)
	s2.SampleSeq(row, &seq)
	after := 0.0
	for _, v := range row {
		after += float64(v)
	}
	if sum != after {
		t.Fatal("SampleSeq modified the logits")
	}
}

func TestFieldsRequest(t *testing.T) {
	tests := []struct {
		body  string
		field string // "" = valid
		msg   string
		check func(Request) bool
	}{
		{`{}`, "", "", func(r Request) bool { return r.Temperature == 1 && r.RepetitionPenalty == 0 && r.LogitBias == nil }},
		{`{"top_p":0}`, "", "", func(r Request) bool { return r.Temperature == 0 }},
		{`{"top_k":-1}`, "", "", func(r Request) bool { return r.TopK == 0 }},
		{`{"seed":-1}`, "", "", func(r Request) bool { return *r.Seed == math.MaxUint64 }},
		{`{"frequency_penalty":-2,"presence_penalty":2,"repetition_penalty":1.2}`, "", "",
			func(r Request) bool {
				return r.FrequencyPenalty == -2 && r.PresencePenalty == 2 && r.RepetitionPenalty == 1.2
			}},
		{`{"logit_bias":{"9":-100,"2":100,"30":0.5}}`, "", "", func(r Request) bool {
			return fmt.Sprint(r.LogitBias) == "[{2 100} {9 -100} {30 0.5}]"
		}},
		{`{"logit_bias":null}`, "", "", func(r Request) bool { return r.LogitBias == nil }},
		{`{"temperature":2.5}`, "temperature", "2.5 is out of range [0, 2] (0 is greedy)", nil},
		{`{"top_p":1.5}`, "top_p", "1.5 is out of range [0, 1] (0 is greedy)", nil},
		{`{"top_k":-2}`, "top_k", "-2 must be >= 0 (0 or -1 disable it)", nil},
		{`{"min_p":-0.1}`, "min_p", "-0.1 is out of range [0, 1]", nil},
		{`{"frequency_penalty":2.01}`, "frequency_penalty", "2.01 is out of range [-2, 2]", nil},
		{`{"presence_penalty":-3}`, "presence_penalty", "-3 is out of range [-2, 2]", nil},
		{`{"repetition_penalty":0}`, "repetition_penalty", "0 is out of range [0.01, 10]", nil},
		{`{"repetition_penalty":11}`, "repetition_penalty", "11 is out of range [0.01, 10]", nil},
		{`{"logit_bias":{"5":100.5}}`, "logit_bias", "token 5: bias 100.5 is out of range [-100, 100]", nil},
		{`{"logit_bias":{"5":"x"}}`, "logit_bias", `token 5: the bias "x" is not a number`, nil},
		{`{"logit_bias":{"05":1}}`, "logit_bias", `key "05" is not a token id`, nil},
		{`{"logit_bias":{"-1":1}}`, "logit_bias", `key "-1" is not a token id`, nil},
		{`{"logit_bias":{"hello":1}}`, "logit_bias", `key "hello" is not a token id`, nil},
		{`{"logit_bias":{"2147483648":1}}`, "logit_bias", `key "2147483648" is not a token id`, nil},
		{`{"logit_bias":[1,2]}`, "logit_bias", "expected an object", nil},
		{`{"logit_bias":` + manyBias(301) + `}`, "logit_bias", "301 entries given, at most 300 are allowed", nil},
		{`{"logit_bias":` + manyBias(300) + `}`, "", "", func(r Request) bool { return len(r.LogitBias) == 300 }},
	}
	for _, tc := range tests {
		var f Fields
		err := json.Unmarshal([]byte(tc.body), &f)
		var r Request
		if err == nil {
			r, err = f.Request()
		}
		var fe *FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case tc.field == "" && !tc.check(r):
			t.Errorf("%s: %+v", tc.body, r)
		case tc.field != "" && (!errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Problem, tc.msg)):
			t.Errorf("%s: %v; want a *FieldError for %s saying %q", tc.body, err, tc.field, tc.msg)
		}
	}
}

func manyBias(n int) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%d":1`, i)
	}
	b.WriteByte('}')
	return b.String()
}

// TestMerge: which request fields join a policy's parameters, and which
// are refused rather than dropped.
func TestMerge(t *testing.T) {
	f := func(name string) sampler.Param {
		return sampler.Param{Name: name, Type: sampler.TypeFloat, Min: 0, Max: 10, Default: 1}
	}
	sampling := newSchema(sampler.Descriptor{Name: "s", PreOps: []string{"penalties", "bias", "temperature"}, Params: []sampler.Param{f("top_p"), f("tau")}})
	bare := newSchema(sampler.Descriptor{Name: "bare", Params: []sampler.Param{f("tau")}})
	argmax := newSchema(sampler.Descriptor{Name: "argmax", ArgmaxInvariant: true, PreOps: []string{"penalties"}})
	tests := []struct {
		name   string
		s      *schema
		params map[string]any
		req    Request
		want   string // the merged map, or the refused field
		err    string
	}{
		{"temperature always joins", sampling, nil, Request{Temperature: 1}, "map[temperature:1]", ""},
		{"set fields join", sampling, map[string]any{"tau": 2.0}, Request{Temperature: 0.5, TopP: 0.9, FrequencyPenalty: 0.5, RepetitionPenalty: 1.1},
			"map[frequency_penalty:0.5 repetition_penalty:1.100000023841858 tau:2 temperature:0.5 top_p:0.8999999761581421]", ""},
		{"sampler_params win over a neutral field", sampling, map[string]any{"temperature": 0.7}, Request{Temperature: 1}, "map[temperature:0.7]", ""},
		{"equal values both ways", sampling, map[string]any{"temperature": 0.5}, Request{Temperature: 0.5}, "map[temperature:0.5]", ""},
		{"conflict", sampling, map[string]any{"temperature": 0.7}, Request{Temperature: 0.5}, "temperature", "conflicts with sampler_params.temperature"},
		{"unset fields stay out", bare, nil, Request{Temperature: 1}, "map[]", ""},
		{"undeclared filter", bare, nil, Request{Temperature: 1, TopK: 5}, "top_k", "5 is not honoured: the sampler takes tau"},
		{"undeclared temperature", bare, nil, Request{Temperature: 0}, "temperature", "is not honoured"},
		{"undeclared penalty", bare, nil, Request{Temperature: 1, PresencePenalty: 1}, "presence_penalty", "is not honoured"},
		{"undeclared bias", bare, nil, Request{Temperature: 1, LogitBias: []TokenBias{{1, 1}}}, "logit_bias", `does not declare the "bias" pre-op`},
		{"argmax-invariant ignores filters", argmax, nil, Request{Temperature: 0.3, TopP: 0.5, TopK: 3, MinP: 0.2}, "map[]", ""},
		{"argmax-invariant takes penalties", argmax, nil, Request{FrequencyPenalty: 1}, "map[frequency_penalty:1]", ""},
		{"argmax-invariant refuses bias it lacks", argmax, nil, Request{LogitBias: []TokenBias{{1, 1}}}, "logit_bias", "does not declare"},
	}
	for _, tc := range tests {
		got, err := tc.s.merge("p", tc.params, tc.req)
		var pe *ParamError
		switch {
		case tc.err == "" && (err != nil || fmt.Sprint(got) != tc.want):
			t.Errorf("%s: %v %v, want %s", tc.name, got, err, tc.want)
		case tc.err != "" && (!errors.As(err, &pe) || pe.Param != tc.want || !pe.FromRequest || !strings.Contains(pe.Problem, tc.err)):
			t.Errorf("%s: %v, want a request *ParamError for %s saying %q", tc.name, err, tc.want, tc.err)
		}
	}
}

// TestCompile runs the mapping against the built-in policies.
func TestCompile(t *testing.T) {
	r := newRegistry(t, Options{})
	c, err := r.Compile("", nil, Request{Temperature: 0.7, TopP: 0.9, TopK: 20, FrequencyPenalty: 0.5, RepetitionPenalty: 1.2})
	if err != nil {
		t.Fatal(err)
	}
	if v := c.Values(); c.Policy() != "standard" || v["temperature"] != float64(float32(0.7)) || v["top_k"] != 20 || v["frequency_penalty"] != 0.5 || len(v) != 5 {
		t.Fatalf("standard: %s %v", c.Policy(), v)
	}
	if c.host.temperature != 0.7 || c.host.frequency != 0.5 || c.host.repetition != 1.2 {
		t.Fatalf("host pre-op parameters %+v", c.host)
	}
	st := NewSeqState(Request{}, &c, []int32{4, 1, 4}, 0)
	if fmt.Sprint(st.Prompt) != "[1 4]" {
		t.Fatalf("the repetition penalty from the compiled policy did not keep the prompt: %v", st.Prompt)
	}
	if _, err := r.Compile("greedy", nil, Request{Temperature: 0.4, TopP: 0.5, PresencePenalty: 1, LogitBias: []TokenBias{{3, -5}}}); err != nil {
		t.Fatalf("greedy with filters, penalties and bias: %v", err)
	}
	for _, tc := range []struct {
		policy string
		params map[string]any
		req    Request
		param  string
		from   bool
	}{
		{"typical", nil, Request{Temperature: 1, TopP: 0.9}, "top_p", true},
		{"standard", nil, Request{Temperature: 3}, "temperature", true},
		{"standard", map[string]any{"top_k": 4.5}, Request{Temperature: 1}, "top_k", false},
		{"mirostat", map[string]any{"tau": 5.0}, Request{Temperature: 0.5, MinP: 0.1}, "min_p", true},
	} {
		_, err := r.Compile(tc.policy, tc.params, tc.req)
		var pe *ParamError
		if !errors.As(err, &pe) || pe.Param != tc.param || pe.FromRequest != tc.from {
			t.Errorf("%s %v %+v: %v, want a *ParamError for %s (from request %v)", tc.policy, tc.params, tc.req, err, tc.param, tc.from)
		}
	}
	if _, err := r.Compile("nope", nil, Request{}); !errors.Is(err, ErrUnknownPolicy) {
		t.Fatalf("unknown policy: %v", err)
	}
}

// TestPolicyAppliesPromptRepetition: a plugin policy sees the repetition
// penalty over the prompt too (greedy with a strong penalty on the
// argmax, which only the prompt holds).
func TestPolicyAppliesPromptRepetition(t *testing.T) {
	r := newRegistry(t, Options{})
	rows := batchOf(1, 300, 8)
	best := 0
	for i, v := range rows[0] {
		if v > rows[0][best] {
			best = i
		}
	}
	if rows[0][best] <= 0 {
		t.Fatal("want a positive best logit")
	}
	req := Request{RepetitionPenalty: 10}
	c, err := r.Compile("greedy", nil, req)
	if err != nil {
		t.Fatal(err)
	}
	seqs := []SeqState{NewSeqState(req, &c, []int32{int32(best)}, 0)}
	out := make([]Choice, 1)
	if err := r.SampleBatch(t.Context(), "greedy", rows, seqs, out); err != nil {
		t.Fatal(err)
	}
	ref := refAdjust(rows[0], []int32{int32(best)}, nil, 10, 0, 0, nil)
	want := 0
	for i, v := range ref {
		if v > ref[want] {
			want = i
		}
	}
	if out[0].Token != int32(want) || want == best {
		t.Fatalf("greedy policy chose %d, reference %d (unpenalised %d)", out[0].Token, want, best)
	}
}

// BenchmarkSampleSeq: the host sampler over a 32000-token row, plain and
// with every penalty and 16 bias entries after 256 generated tokens and a
// 512-token prompt (greedy and sampled). Allocations must stay 0.
func BenchmarkSampleSeq(b *testing.B) {
	row := randomLogits(32000, 1)
	prompt := make([]int32, 512)
	gen := make([]int32, 256)
	rng := rand.New(rand.NewPCG(2, 2))
	for i := range prompt {
		prompt[i] = int32(rng.IntN(32000))
	}
	for i := range gen {
		gen[i] = int32(rng.IntN(32000))
	}
	bias := map[int32]float32{}
	for i := range 16 {
		bias[int32(i*1999)] = -5
	}
	pen := Request{FrequencyPenalty: 0.5, PresencePenalty: 0.3, RepetitionPenalty: 1.2, LogitBias: NormalizeBias(bias)}
	for _, tc := range []struct {
		name string
		req  Request
	}{
		{"greedy", Request{}},
		{"greedy+penalties", pen},
		{"sampled", Request{Temperature: 0.8, TopP: 0.9}},
		{"sampled+penalties", func() Request { r := pen; r.Temperature, r.TopP = 0.8, 0.9; return r }()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var s Sampler
			seq := NewSeqState(tc.req, nil, prompt, 1)
			seq.Generated = gen
			b.ReportAllocs()
			for i := range b.N {
				seq.Step = uint64(i)
				s.SampleSeq(row, &seq)
			}
		})
	}
}
