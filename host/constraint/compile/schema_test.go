package compile

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	check "github.com/kvhost/kvhost/host/constraint/constrainttest"
	"github.com/kvhost/kvhost/sdk/constraint/grammar"
)

func schemaFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../testdata/schemas/*.json")
	if err != nil || len(files) != 20 {
		t.Fatalf("want the 20 schemas of ../testdata/schemas, got %d (%v)", len(files), err)
	}
	return files
}

func program(t testing.TB, gr *grammar.Grammar) *grammar.Program {
	t.Helper()
	v, err := check.ByteVocab(`{"`, `":`, `", "`, `"}`, `[`, `], "`, `null`, `true`, `12`, `0.`, `-`, `é`, "\xe6\x97", "\xa5", `\"`, `\n`, `2024-0`, `@`)
	if err != nil {
		t.Fatal(err)
	}
	p, err := grammar.Compile(gr, v, grammar.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSchemasSampleValid draws random outputs of every test schema's
// grammar (uniform over allowed tokens: the grammar alone decides) and
// validates each with the independent validator.
func TestSchemasSampleValid(t *testing.T) {
	for _, f := range schemaFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			doc, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			gr, err := JSONSchema(doc)
			if err != nil {
				t.Fatal(err)
			}
			chk, err := check.NewSchema(doc)
			if err != nil {
				t.Fatal(err)
			}
			p := program(t, gr)
			r := rand.New(rand.NewPCG(7, uint64(len(doc))))
			for i := range 60 {
				text, err := check.Sample(p, r, 300)
				if err != nil {
					t.Fatalf("sample %d: %v", i, err)
				}
				if err := chk.Check(text); err != nil {
					t.Fatalf("sample %d %q: %v", i, text, err)
				}
			}
		})
	}
}

// accepts reports whether gr matches s exactly.
func accepts(t testing.TB, gr *grammar.Grammar, s string) bool {
	t.Helper()
	m := program(t, gr).Start()
	return m.AdvanceBytes([]byte(s)) == nil && m.Accepting()
}

func TestSchemaAcceptsAndRefuses(t *testing.T) {
	cases := []struct {
		schema string
		yes    []string
		no     []string
	}{
		{`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]}`,
			[]string{`{"b":""}`, `{"a":1,"b":"x"}`, `{"b":"x","c":true}`, `{ "a" : -3 , "b" : "q" , "c" : false }`},
			[]string{`{}`, `{"a":1}`, `{"b":"x","a":1}`, `{"a":1,,"b":""}`, `{"b":"x",}`, `{"b":"x","d":1}`}},
		{`{"type":"array","prefixItems":[{"type":"null"},{"type":"boolean"}],"items":false}`,
			[]string{`[]`, `[null]`, `[null,true]`},
			[]string{`[true]`, `[null,true,null]`}},
		{`{"type":"string","minLength":2,"maxLength":3}`,
			[]string{`"ab"`, `"a\u00e9c"`, `"日本"`, `"\"\\"`},
			[]string{`"a"`, `"abcd"`, `"\ud800x"`, `"😀a"`}}, // non-BMP: UTF-16 validators count 2
		{`{"type":"integer","exclusiveMinimum":-3,"maximum":12}`,
			[]string{`-2`, `0`, `12`, `7`},
			[]string{`-3`, `13`, `-0`, `01`, `1.5`}},
		{`{"enum":["a",1,[true]], "type":"string"}`, []string{`"a"`}, []string{`1`, `[true]`}},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, []string{`{}`, `{"x":1,"y":2}`}, []string{`{"x":"1"}`}},
		{`{"type":"number"}`, []string{`1e10`, `-0.5E-3`, `1234567890123456`}, []string{`12345678901234567`, `1e100`, `.5`, `+1`}},
	}
	for _, c := range cases {
		gr, err := JSONSchema([]byte(c.schema))
		if err != nil {
			t.Fatalf("%s: %v", c.schema, err)
		}
		for _, s := range c.yes {
			if !accepts(t, gr, s) {
				t.Errorf("%s refuses %s", c.schema, s)
			}
		}
		for _, s := range c.no {
			if accepts(t, gr, s) {
				t.Errorf("%s accepts %s", c.schema, s)
			}
		}
	}
}

func TestSchemaUnsupportedNamesKeyword(t *testing.T) {
	cases := map[string]string{
		`{"type":"object","properties":{"a":{"not":{"type":"null"}}}}`:       "not",
		`{"type":"array","uniqueItems":true}`:                                "uniqueItems",
		`{"type":"string","format":"hostname"}`:                              "format",
		`{"type":"integer","multipleOf":3}`:                                  "multipleOf",
		`{"patternProperties":{"^x":{"type":"string"}}}`:                     "patternProperties",
		`{"$ref":"http://example.com/s.json"}`:                               "$ref",
		`{"allOf":[{"type":"string"},{"maxLength":3}]}`:                      "allOf",
		`{"type":"string","pattern":"a\\bb"}`:                                "word boundary",
		`{"if":{"type":"string"},"then":{"maxLength":2}}`:                    "if",
		`{"$defs":{"x":{"type":"string"}},"$ref":"#/$defs/x","maxLength":1}`: "maxLength",
		`{"type":"object","minProperties":1}`:                                "minProperties",
	}
	for schema, kw := range cases {
		_, err := JSONSchema([]byte(schema))
		var ue *UnsupportedError
		if !errors.As(err, &ue) || !strings.Contains(ue.Keyword, kw) {
			t.Errorf("%s: %v, want an UnsupportedError naming %q", schema, err, kw)
		}
	}
	for _, bad := range []string{`{"type":"object"`, `{"type":"strin"}`, `{"minimum":"x"}`} {
		_, err := JSONSchema([]byte(bad))
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("%s: %v, want a SyntaxError", bad, err)
		}
	}
}

func TestJSONObjectAndChoice(t *testing.T) {
	obj := JSONObject()
	for _, s := range []string{`{}`, ` {"a":[1,{"b":null}],"c":"\u00e9"}`, "{\n  \"x\": -1.5e3\n}"} {
		if !accepts(t, obj, s) {
			t.Errorf("json_object refuses %s", s)
		}
	}
	for _, s := range []string{`[]`, `1`, `{"a":}`, `{} `} {
		if accepts(t, obj, s) {
			t.Errorf("json_object accepts %s", s)
		}
	}
	ch, err := Choice([]string{"yes", "no", "maybe so"})
	if err != nil {
		t.Fatal(err)
	}
	if !accepts(t, ch, "maybe so") || accepts(t, ch, "ye") || accepts(t, ch, "yesno") {
		t.Error("choice grammar wrong")
	}
	if _, err := Choice(nil); err == nil {
		t.Error("empty choice list accepted")
	}
}

func TestToolCallGrammar(t *testing.T) {
	tools := []Tool{
		{Name: "get_weather", Parameters: json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false}`)},
		{Name: "now"},
	}
	hermes, err := ToolCallGrammar(ToolCalls{Tools: tools, ArgsKey: "arguments", Open: "", Close: "\n</tool_call>", Sep: "\n<tool_call>\n", Min: 1, Max: -1})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
		"{\"name\": \"now\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {\"x\": [1]}}\n</tool_call>",
	} {
		if !accepts(t, hermes, s) {
			t.Errorf("hermes refuses %q", s)
		}
	}
	for _, s := range []string{"{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>", "{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>", ""} {
		if accepts(t, hermes, s) {
			t.Errorf("hermes accepts %q", s)
		}
	}
	one, err := ToolCallGrammar(ToolCalls{Tools: tools[:1], ArgsKey: "arguments", Sep: ", ", ListOpen: "[", ListClose: "]", Min: 1, Max: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !accepts(t, one, `[{"name": "get_weather", "arguments": {"city": "Rome"}}]`) ||
		accepts(t, one, `[{"name": "get_weather", "arguments": {"city": "Rome"}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]`) {
		t.Error("mistral-style single call grammar wrong")
	}
	_, err = ToolCallGrammar(ToolCalls{Tools: []Tool{{Name: "x", Parameters: json.RawMessage(`{"type":"object","properties":{"a":{"not":{}}}}`)}}, ArgsKey: "arguments", Min: 1, Max: 1})
	var ue *UnsupportedError
	if !errors.As(err, &ue) || ue.Keyword != "not" || !strings.Contains(ue.Path, "tools[0]") {
		t.Errorf("unsupported keyword in a tool: %v", err)
	}
}
