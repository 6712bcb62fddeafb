package compile

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	check "github.com/kvhost/kvhost/host/constraint/constrainttest"
	g "github.com/kvhost/kvhost/sdk/constraint/grammar"
)

var regexCases = []string{
	`[a-z]+@[a-z]+\.(com|org)`,
	`\d{3}-\d{2,4}`,
	`(?i)hello( world)?`,
	`^[A-Z][a-z]{0,5}!?$`,
	`(ab|cd)*x`,
	`[^\n"]{1,8}`,
	`\w+\s\W`,
	`日本[語人]`,
	`.{2}z`,
	`[\x{1F600}-\x{1F64F}]|ok`,
	`a|`,
}

// TestRegexSamplesMatch: everything a regex grammar generates matches the
// pattern by Go's own engine, as a whole.
func TestRegexSamplesMatch(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, pat := range regexCases {
		gr, err := Regex(pat)
		if err != nil {
			t.Fatalf("%s: %v", pat, err)
		}
		re := regexp.MustCompile(`^(?:` + strings.TrimSuffix(strings.TrimPrefix(pat, "^"), "$") + `)$`)
		p := program(t, gr)
		for i := range 100 {
			s, err := check.Sample(p, r, 60)
			if err != nil {
				t.Fatalf("%s sample %d: %v", pat, i, err)
			}
			if !re.MatchString(s) {
				t.Fatalf("%s generated %q, which does not match", pat, s)
			}
		}
	}
}

// TestRegexInJSONString: a schema pattern's characters are JSON-escaped,
// and the decoded string matches.
func TestRegexInJSONString(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, pat := range []string{`[\x00-\x1f"\\a]{1,6}`, `\t"x"`, `[^a-z]`} {
		e, err := regexExpr(pat, true)
		if err != nil {
			t.Fatal(err)
		}
		b := g.NewBuilder()
		b.Define("root", g.Seq(g.Lit(`"`), e, g.Lit(`"`)))
		gr, err := b.Build("root")
		if err != nil {
			t.Fatal(err)
		}
		re := regexp.MustCompile(`^(?:` + pat + `)$`)
		p := program(t, gr)
		for range 100 {
			text, err := check.Sample(p, r, 40)
			if err != nil {
				t.Fatal(err)
			}
			var s string
			if err := json.Unmarshal([]byte(text), &s); err != nil {
				t.Fatalf("%s: %q is not a JSON string: %v", pat, text, err)
			}
			if !re.MatchString(s) {
				t.Fatalf("%s: %q decodes to %q, which does not match", pat, text, s)
			}
		}
	}
}

func TestRegexErrors(t *testing.T) {
	for pat, kw := range map[string]string{`a\bc`: "word boundary", `a^b`: "anchor"} {
		_, err := Regex(pat)
		var ue *UnsupportedError
		if !errors.As(err, &ue) || !strings.Contains(ue.Keyword, kw) {
			t.Errorf("%s: %v, want unsupported %q", pat, err, kw)
		}
	}
	var se *SyntaxError
	if _, err := Regex(`x{2000}`); !errors.As(err, &se) {
		t.Errorf("repeat count beyond RE2's 1000: %v", err)
	}
	if _, err := Regex(`(a`); !errors.As(err, &se) {
		t.Errorf("unbalanced parenthesis: %v", err)
	}
}

func FuzzRegex(f *testing.F) {
	for _, c := range regexCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, pat string) {
		gr, err := Regex(pat)
		if err != nil {
			return
		}
		if err := gr.Validate(); err != nil {
			t.Fatalf("%q compiled to an invalid grammar: %v", pat, err)
		}
	})
}
