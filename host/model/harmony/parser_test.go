package harmony

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// result is a whole turn read by a Parser: the deltas joined.
type result struct {
	Reasoning, Content string
	Calls              []FunctionCall
	Done               bool
}

func (r *result) add(d Delta) {
	r.Reasoning += d.Reasoning
	r.Content += d.Content
	r.Calls = append(r.Calls, d.Calls...)
	r.Done = r.Done || d.Done
}

// parse feeds pieces to a parser, then ends it.
func parse(pieces []string) result {
	p := NewParser()
	var r result
	for _, s := range pieces {
		r.add(p.Push(s))
	}
	r.add(p.End())
	return r
}

// Hand-written harmony transcripts, as the text after the prompt's
// "<|start|>assistant" (special tokens spelled out), and what a client
// must get from them. ended: the turn's text stops there (a later text
// is appended to check that it is ignored).
var golden = []struct {
	name string
	in   string
	want result
}{
	{"reasoning then final, <|return|>",
		`<|channel|>analysis<|message|>User says hi. Reply briefly.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>`,
		result{Reasoning: "User says hi. Reply briefly.", Content: "Hello! How can I help?", Done: true}},
	{"final only",
		`<|channel|>final<|message|>Paris.<|return|>`,
		result{Content: "Paris.", Done: true}},
	{"final closed by <|end|> stops the turn",
		`<|channel|>final<|message|>Paris.<|end|><|start|>assistant<|channel|>final<|message|>again<|return|>`,
		result{Content: "Paris.", Done: true}},
	{"tool call as the model writes it (recipient after the channel, <|constrain|>json)",
		`<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}<|call|>`,
		result{Reasoning: "Need the weather.", Calls: []FunctionCall{{Name: "get_weather", Args: `{"city": "Paris"}`}}, Done: true}},
	{"tool call as the template writes it (recipient in the role, bare json)",
		`<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{"q":"x"}<|call|>`,
		result{Reasoning: "Look it up.", Calls: []FunctionCall{{Name: "lookup", Args: `{"q":"x"}`}}, Done: true}},
	{"first message addressed to a tool",
		` to=functions.lookup<|channel|>commentary <|constrain|>json<|message|> {"q":"y"} <|call|>`,
		result{Calls: []FunctionCall{{Name: "lookup", Args: `{"q":"y"}`}}, Done: true}},
	{"commentary preamble is content, then a call",
		`<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{}<|call|>`,
		result{Content: "Let me check.", Calls: []FunctionCall{{Name: "f", Args: `{}`}}, Done: true}},
	{"unknown channel is reasoning, never the answer",
		`<|channel|>scratchpad<|message|>thinking aloud<|end|><|start|>assistant<|channel|>final<|message|>42<|return|>`,
		result{Reasoning: "thinking aloud", Content: "42", Done: true}},
	{"missing <|message|>: the header's text after the channel is its body",
		`<|channel|>final Hello there<|return|>`,
		result{Content: "Hello there", Done: true}},
	{"missing <|message|> in an analysis header, then a proper final",
		`<|channel|>analysis thinking<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>`,
		result{Reasoning: "thinking", Content: "ok", Done: true}},
	{"no header at all: plain text is content",
		`Just text, no harmony.<|return|>`,
		result{Content: "Just text, no harmony.", Done: true}},
	{"a header that never ends is read as a body",
		`<|channel|>final ` + strings.Repeat("x", 300),
		result{Content: strings.Repeat("x", 300)}},
	{"cut mid-reasoning (max_tokens): what was read, not done",
		`<|channel|>analysis<|message|>The user wants`,
		result{Reasoning: "The user wants"}},
	{"cut mid-final",
		`<|channel|>analysis<|message|>r<|end|><|start|>assistant<|channel|>final<|message|>The answer is`,
		result{Reasoning: "r", Content: "The answer is"}},
	{"cut mid-call: incomplete JSON is given back as content",
		`<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"city": "Pa`,
		result{Content: `{"city": "Pa`}},
	{"cut after a complete call body (EOG not spelled out): still a call",
		`<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"city": "Paris"}`,
		result{Calls: []FunctionCall{{Name: "f", Args: `{"city": "Paris"}`}}}},
	{"cut inside a header",
		`<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>fin`,
		result{Reasoning: "a", Content: ""}},
	{"stray markers inside a body are dropped",
		`<|channel|>final<|message|>a<|channel|>b<|constrain|>c<|message|>d<|return|>`,
		result{Content: "abcd", Done: true}},
	{"text that looks like a marker but is none stays text",
		`<|channel|>final<|message|>x <|y|> <| z<|return|>`,
		result{Content: "x <|y|> <| z", Done: true}},
	{"a message from another role is reasoning",
		`<|channel|>analysis<|message|>a<|end|><|start|>functions.f to=assistant<|channel|>commentary<|message|>{"t":1}<|end|><|start|>assistant<|channel|>final<|message|>b<|return|>`,
		result{Reasoning: `a{"t":1}`, Content: "b", Done: true}},
	{"a call to a builtin tool keeps its recipient",
		`<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis to=browser.search <|constrain|>json<|message|>{"query":"x"}<|call|>`,
		result{Reasoning: "a", Calls: []FunctionCall{{Name: "browser.search", Args: `{"query":"x"}`}}, Done: true}},
	{"a message missing <|end|> before <|start|>",
		`<|channel|>analysis<|message|>a<|start|>assistant<|channel|>final<|message|>b<|return|>`,
		result{Reasoning: "a", Content: "b", Done: true}},
	{"a header naming no channel is content",
		`<|message|>Hi<|return|>`,
		result{Content: "Hi", Done: true}},
	{"an empty message between two ends is no answer",
		`<|channel|>analysis<|message|>a<|end|><|end|><|start|>assistant<|channel|>final<|message|>b<|return|>`,
		result{Reasoning: "a", Content: "b", Done: true}},
	{"multi-byte text",
		`<|channel|>final<|message|>Grüße 😀<|return|>`,
		result{Content: "Grüße 😀", Done: true}},
}

// TestParserGolden reads each transcript whole, one byte at a time, and in
// random splits: the result never depends on how the text arrived; text
// after the end of the turn is ignored; no special token leaks.
func TestParserGolden(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range golden {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			check := func(how string, pieces []string) {
				t.Helper()
				got := parse(pieces)
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s:\n got %+v\nwant %+v", how, got, want)
				}
				for _, s := range append([]string{got.Reasoning, got.Content}, argsOf(got.Calls)...) {
					for _, m := range Tokens {
						if strings.Contains(s, m) {
							t.Fatalf("%s: %s leaked into %q", how, m, s)
						}
					}
				}
			}
			check("whole", []string{tc.in})
			var bytes []string
			for i := range len(tc.in) {
				bytes = append(bytes, tc.in[i:i+1])
			}
			check("bytewise", bytes)
			for k := range 20 {
				var pieces []string
				for s := tc.in; s != ""; {
					n := min(len(s), 1+rng.IntN(12))
					pieces, s = append(pieces, s[:n]), s[n:]
				}
				check("split "+string(rune('a'+k)), pieces)
			}
			if want.Done {
				got := parse([]string{tc.in, "<|start|>assistant<|channel|>final<|message|>more<|return|>"})
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("text after the end was read:\n got %+v\nwant %+v", got, want)
				}
			}
		})
	}
}

func argsOf(calls []FunctionCall) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Args, c.Name)
	}
	return out
}

// TestParserStreamsAsItReads: reasoning and content come out as their
// text arrives, held back only while a suffix may begin a marker.
func TestParserStreamsAsItReads(t *testing.T) {
	p := NewParser()
	steps := []struct {
		in   string
		want Delta
	}{
		{"<|channel|>analysis", Delta{}},
		{"<|message|>Think", Delta{Reasoning: "Think"}},
		{"ing <", Delta{Reasoning: "ing "}},
		{"|", Delta{}},
		{"en", Delta{}},
		{"d|>", Delta{}},
		{"<|start|>assistant<|channel|>final<|message|>Hi", Delta{Content: "Hi"}},
		{" <|x", Delta{Content: " <|x"}},
		{"<|ret", Delta{}},
		{"urn|>", Delta{Done: true}},
		{"ignored", Delta{}},
	}
	for i, s := range steps {
		if got := p.Push(s.in); !reflect.DeepEqual(got, s.want) {
			t.Fatalf("step %d Push(%q) = %+v, want %+v", i, s.in, got, s.want)
		}
	}
	if got := p.End(); !reflect.DeepEqual(got, Delta{}) {
		t.Fatalf("End after done = %+v", got)
	}
}

// BenchmarkParser reads a 2 KB turn (reasoning, a preamble, a call) in
// 4-byte pieces, about a token each.
func BenchmarkParser(b *testing.B) {
	turn := "<|channel|>analysis<|message|>" + strings.Repeat("We need the weather in Paris. ", 40) + "<|end|>" +
		"<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>" +
		`<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris", "unit": "c"}<|call|>`
	var pieces []string
	for s := turn; s != ""; {
		n := min(4, len(s))
		pieces, s = append(pieces, s[:n]), s[n:]
	}
	b.SetBytes(int64(len(turn)))
	b.ReportAllocs()
	for b.Loop() {
		p := NewParser()
		for _, s := range pieces {
			p.Push(s)
		}
		p.End()
	}
}

// FuzzParser: on any text, split anywhere, the parser never panics, never
// lets a special token through (its text appears only where the model's
// plain text spells it), and reads the same as when the text arrives
// whole.
func FuzzParser(f *testing.F) {
	for _, tc := range golden {
		f.Add(tc.in, uint8(3))
	}
	f.Fuzz(func(t *testing.T, in string, step uint8) {
		n := int(step%16) + 1
		var pieces []string
		for s := in; s != ""; {
			k := min(n, len(s))
			pieces, s = append(pieces, s[:k]), s[k:]
		}
		whole, split := parse([]string{in}), parse(pieces)
		if !reflect.DeepEqual(whole, split) {
			t.Fatalf("whole %+v, in pieces of %d %+v", whole, n, split)
		}
		// Only the model's plain text comes out: a marker's text can appear
		// only where the text around the markers spells it.
		var strip []string
		for _, m := range Tokens {
			strip = append(strip, m, "")
		}
		plain := strings.NewReplacer(strip...).Replace(in)
		for _, s := range append([]string{whole.Reasoning, whole.Content}, argsOf(whole.Calls)...) {
			for _, m := range Tokens {
				if strings.Contains(s, m) && !strings.Contains(plain, m) {
					t.Fatalf("%s leaked into %q", m, s)
				}
			}
		}
	})
}
