package hub

import (
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Ref
		err  string
	}{
		{in: "org/name", want: Ref{Repo: "org/name"}},
		{in: "hf://org/name", want: Ref{Repo: "org/name"}},
		{in: "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M", want: Ref{Repo: "bartowski/Llama-3.2-1B-Instruct-GGUF", Quant: "Q4_K_M"}},
		{in: "huggingface.co/org/name:model.Q8_0.gguf", want: Ref{Repo: "org/name", File: "model.Q8_0.gguf"}},
		{in: "hf://org/name@v1.0:sub/dir/x.gguf", want: Ref{Repo: "org/name", Revision: "v1.0", File: "sub/dir/x.gguf"}},
		{in: "org/name@" + commitA, want: Ref{Repo: "org/name", Revision: commitA}},
		{in: "name-only", err: "not a Hugging Face model id"},
		{in: "a/b/c", err: "not a Hugging Face model id"},
		{in: "org/name:", err: "nothing after ':'"},
		{in: "org/name@", err: "empty revision"},
		{in: "org/../x", err: "not a Hugging Face model id"},
		{in: "org/name:../etc/passwd", err: "not a clean relative path"},
		{in: "org/name:/abs.gguf", err: "not a clean relative path"},
	} {
		got, err := ParseRef(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if back, err := ParseRef(got.String()); err != nil || back != got {
			t.Errorf("%q: String() %q does not parse back (%+v, %v)", tc.in, got.String(), back, err)
		}
	}
}

func TestLooksLikeRef(t *testing.T) {
	for in, want := range map[string]bool{
		"hf://org/name":            true,
		"org/name":                 true,
		"org/name:Q4_K_M":          true,
		"models/x.gguf":            false, // a mistyped file, not a repository
		"org/name:model.Q8_0.gguf": true,
		"./models/x.gguf":          false,
		"/abs/x.gguf":              false,
		"~/x/y":                    false,
		"x.gguf":                   false,
		"../shared/models/a.gguf":  false,
		"a/b/c.gguf":               false,
	} {
		if got := LooksLikeRef(in); got != want {
			t.Errorf("LooksLikeRef(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestSelectGGUF(t *testing.T) {
	files := []string{"README.md", "Llama-3.2-1B-Instruct-Q4_K_M.gguf", "Llama-3.2-1B-Instruct-Q4_K_S.gguf", "Llama-3.2-1B-Instruct-IQ4_XS.gguf", "Llama-3.2-1B-Instruct-f16.gguf", "Llama-3.2-1B-Instruct-Q8_0.gguf"}
	for quant, want := range map[string]string{
		"Q4_K_M": "Llama-3.2-1B-Instruct-Q4_K_M.gguf",
		"q4_k_m": "Llama-3.2-1B-Instruct-Q4_K_M.gguf",
		"IQ4_XS": "Llama-3.2-1B-Instruct-IQ4_XS.gguf",
		"F16":    "Llama-3.2-1B-Instruct-f16.gguf",
		"Q8_0":   "Llama-3.2-1B-Instruct-Q8_0.gguf",
	} {
		got, err := selectGGUF("r", files, quant)
		if err != nil || got.File != want || got.Shards != nil {
			t.Errorf("%s: %q, %v; want %q", quant, got, err, want)
		}
	}
	// Q4_K is a prefix of two names and the exact token of none.
	if _, err := selectGGUF("r", files, "Q4_K"); err == nil || !strings.Contains(err.Error(), "2 GGUF models matching") {
		t.Errorf("Q4_K: %v, want an ambiguity listing two files", err)
	}
	if got := quantOf("Llama-3.2-1B-Instruct-IQ4_XS.gguf"); got != "IQ4_XS" {
		t.Errorf("quantOf = %q", got)
	}
	if got := quantOf("stories260K.gguf"); got != "" {
		t.Errorf("quantOf(stories260K.gguf) = %q, want none", got)
	}
}
