package hub

import (
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Ref names what to fetch: a repository, a revision, and optionally one file
// or a GGUF quantization.
type Ref struct {
	Repo     string // "org/name"
	Revision string // branch, tag or commit; "" means main
	File     string // a path in the repository ("model-Q4_K_M.gguf")
	Quant    string // a GGUF quantization name ("Q4_K_M"), matched in file names
}

// String is the reference in the form ParseRef reads.
func (r Ref) String() string {
	s := r.Repo
	if r.Revision != "" && r.Revision != DefaultRevision {
		s += "@" + r.Revision
	}
	switch {
	case r.File != "":
		s += ":" + r.File
	case r.Quant != "":
		s += ":" + r.Quant
	}
	return s
}

// DefaultRevision is the branch a reference without @REV names.
const DefaultRevision = "main"

var repoPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// ParseRef reads "[hf://]ORG/NAME[@REV][:FILE|:QUANT]". The prefixes
// hf.co/ and huggingface.co/ are accepted too (as Ollama and llama.cpp
// write them). After the colon, something with a dot or a slash is a file
// path, anything else a quantization name.
func ParseRef(s string) (Ref, error) {
	in := s
	for _, p := range []string{"hf://", "https://huggingface.co/", "huggingface.co/", "hf.co/"} {
		s = strings.TrimPrefix(s, p)
	}
	var r Ref
	if i := strings.IndexByte(s, ':'); i >= 0 {
		sel := s[i+1:]
		s = s[:i]
		if sel == "" {
			return Ref{}, fmt.Errorf("hub: %q: nothing after ':' (give a file name or a quantization such as Q4_K_M)", in)
		}
		if strings.ContainsAny(sel, "./") {
			r.File = sel
		} else {
			r.Quant = sel
		}
	}
	if i := strings.IndexByte(s, '@'); i >= 0 {
		r.Revision = s[i+1:]
		s = s[:i]
		if r.Revision == "" {
			return Ref{}, fmt.Errorf("hub: %q: empty revision after '@'", in)
		}
	}
	parts := strings.Split(s, "/")
	if len(parts) != 2 || !repoPart.MatchString(parts[0]) || !repoPart.MatchString(parts[1]) || strings.Contains(s, "..") {
		return Ref{}, fmt.Errorf("hub: %q is not a Hugging Face model id (want ORG/NAME[@REVISION][:FILE|:QUANT], e.g. bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M)", in)
	}
	r.Repo = s
	if r.File != "" {
		clean := path.Clean(r.File)
		if clean != r.File || strings.HasPrefix(clean, "../") || strings.HasPrefix(clean, "/") {
			return Ref{}, fmt.Errorf("hub: %q: file %q is not a clean relative path", in, r.File)
		}
	}
	return r, nil
}

// LooksLikeRef reports whether s reads as a hub reference rather than a
// local path: an hf:// (or hf.co/) prefix, or ORG/NAME with an optional
// selector and nothing that only a path has (a leading . / or ~, or a model
// file's extension). Callers check that no such
// local path exists before taking a bare ORG/NAME for the hub.
func LooksLikeRef(s string) bool {
	if strings.HasPrefix(s, "hf://") || strings.HasPrefix(s, "hf.co/") || strings.HasPrefix(s, "huggingface.co/") {
		return true
	}
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "/") || strings.HasPrefix(s, "~") {
		return false
	}
	// "models/x.gguf" is a mistyped file, not a repository named x.gguf.
	repo, _, _ := strings.Cut(s, ":")
	for _, ext := range []string{".gguf", ".json", ".safetensors", ".bin"} {
		if strings.HasSuffix(strings.ToLower(repo), ext) {
			return false
		}
	}
	_, err := ParseRef(s)
	return err == nil
}

// quantToken splits a file's path into the tokens a quantization name
// is matched against: "Llama-3.2-1B-Instruct-Q4_K_M.gguf" gives Llama, 3, 2,
// 1B, Instruct, Q4_K_M. Folder names come first ("Q4_K_M/big-00001-of-00002.gguf"
// gives Q4_K_M, big, 00001, of, 00002: split models are often filed in a
// folder named after their quantization).
func quantTokens(file string) []string {
	p := strings.TrimSuffix(file, ".gguf")
	return strings.FieldsFunc(p, func(r rune) bool { return r == '-' || r == '.' || r == ' ' || r == '/' })
}

// selectGGUF picks the GGUF model of files matching quant (none when quant
// is "" and the repo holds no GGUF; the only one when it holds one). A
// split model counts as one model, matched by its first shard's name. Its
// errors list the choices.
func selectGGUF(repo string, files []string, quant string) (GGUFModel, error) {
	models := GGUFModels(files)
	names := make([]string, len(models))
	for i, m := range models {
		names[i] = m.File
	}
	if quant == "" {
		switch len(models) {
		case 0:
			return GGUFModel{}, nil
		case 1:
			return models[0], nil
		}
		return GGUFModel{}, &ChoiceError{Repo: repo, Problem: fmt.Sprintf("holds %d GGUF models; pick one by quantization or file name", len(models)), Files: names}
	}
	var exact, loose []GGUFModel
	for _, m := range models {
		for _, t := range quantTokens(m.File) {
			if strings.EqualFold(t, quant) {
				exact = append(exact, m)
				break
			}
		}
		if strings.Contains(strings.ToUpper(path.Base(m.File)), strings.ToUpper(quant)) {
			loose = append(loose, m)
		}
	}
	match := exact
	if len(match) == 0 {
		match = loose
	}
	switch {
	case len(match) == 1:
		return match[0], nil
	case len(match) == 0 && len(models) == 0:
		return GGUFModel{}, fmt.Errorf("hub: %s holds no GGUF file, so quantization %q cannot be chosen (a safetensors repository is pulled whole: drop the :%s)", repo, quant, quant)
	case len(match) == 0:
		return GGUFModel{}, &ChoiceError{Repo: repo, Problem: fmt.Sprintf("has no GGUF file for quantization %q", quant), Files: names}
	}
	var matched []string
	for _, m := range match {
		matched = append(matched, m.File)
	}
	return GGUFModel{}, &ChoiceError{Repo: repo, Problem: fmt.Sprintf("has %d GGUF models matching %q; name the file", len(match), quant), Files: matched}
}

// ChoiceError is a selection the repository's files do not settle: Files
// are the candidates (a split model by its first shard), listed in the
// message with the quantization each names, so the user can pick one.
type ChoiceError struct {
	Repo    string
	Problem string
	Files   []string
}

func (e *ChoiceError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hub: %s %s:", e.Repo, e.Problem)
	for _, f := range e.Files {
		q := quantOf(f)
		if q != "" {
			fmt.Fprintf(&b, "\n  %s:%s\t(%s%s)", e.Repo, q, f, shardNote(f))
		} else {
			fmt.Fprintf(&b, "\n  %s:%s%s", e.Repo, f, shardNote(f))
		}
	}
	return b.String()
}

// quantPattern recognises llama.cpp's quantization names (Q4_K_M, IQ4_XS,
// Q8_0, F16, BF16, TQ1_0, MXFP4...).
var quantPattern = regexp.MustCompile(`^(?i:(I?Q\d(_[A-Z0-9]+)*|TQ\d_\d|F16|F32|BF16|MXFP4(_MOE)?))$`)

// quantOf is the quantization token of a GGUF file name, "" if none.
func quantOf(file string) string {
	toks := quantTokens(file)
	for i := len(toks) - 1; i >= 0; i-- {
		if quantPattern.MatchString(toks[i]) {
			return toks[i]
		}
	}
	return ""
}
