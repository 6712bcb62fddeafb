package synth

import (
	"fmt"
	"sort"
	"strings"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// ftype is a llama.cpp file type (llama_ftype) gen-model can write: the
// base tensor type and the number stored in general.file_type. Quantized
// files mix types per tensor exactly as llama-quantize does without an
// importance matrix (mixture below), so a generated Q4_K_M file has the
// layout of llama-quantize's Q4_K_M of the same weights.
type ftype struct {
	base gguf.TensorType
	id   uint32
}

// ftypes by gen-model --dtype name (llama-quantize's names, lowercase;
// q3_k, q4_k and q5_k are its aliases for the _m mixes).
var ftypes = map[string]ftype{
	"f32": {gguf.TypeF32, 0}, "f16": {gguf.TypeF16, 1}, "bf16": {gguf.TypeBF16, 32},
	"q8_0": {gguf.TypeQ8_0, 7}, "q4_0": {gguf.TypeQ4_0, 2}, "q4_1": {gguf.TypeQ4_1, 3},
	"q5_0": {gguf.TypeQ5_0, 8}, "q5_1": {gguf.TypeQ5_1, 9},
	"q2_k": {gguf.TypeQ2_K, 10}, "q3_k_m": {gguf.TypeQ3_K, 12},
	"q4_k_s": {gguf.TypeQ4_K, 14}, "q4_k_m": {gguf.TypeQ4_K, 15},
	"q5_k_s": {gguf.TypeQ5_K, 16}, "q5_k_m": {gguf.TypeQ5_K, 17},
	"q6_k": {gguf.TypeQ6_K, 18}, "iq4_nl": {gguf.TypeIQ4_NL, 25}, "iq4_xs": {gguf.TypeIQ4_XS, 30},
}

var ftypeAliases = map[string]string{"q3_k": "q3_k_m", "q4_k": "q4_k_m", "q5_k": "q5_k_m"}

// llama_ftype numbers of the mixes the rules below single out.
const (
	ftQ2K   = 10
	ftQ3KM  = 12
	ftQ4KS  = 14
	ftQ4KM  = 15
	ftQ5KM  = 17
	ftIQ4NL = 25
	ftIQ4XS = 30
)

// DTypes lists the --dtype names gen-model accepts.
func DTypes() []string {
	out := make([]string, 0, len(ftypes)+len(ftypeAliases))
	for n := range ftypes {
		out = append(out, n)
	}
	for n := range ftypeAliases {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func lookupFType(name string) (string, ftype, error) {
	name = strings.ToLower(name)
	if a, ok := ftypeAliases[name]; ok {
		name = a
	}
	if name == "" {
		name = "f32"
	}
	f, ok := ftypes[name]
	if !ok {
		return "", ftype{}, fmt.Errorf("synth: unknown dtype %q (one of %s)", name, strings.Join(DTypes(), ", "))
	}
	return name, f, nil
}

// mixture picks each matrix's type the way llama.cpp's
// llama_tensor_get_type does for a Llama model without an importance
// matrix (one expert, not 70B): the output matrix goes to Q6_K (Q8_0 stays
// Q8_0, and a row length that is not a multiple of the base block gives
// Q8_0); V projections and FFN down projections get more bits in the
// mixes that ask for it (use_more_bits: the first and last eighth of the
// layers and every third in between); then a row length the chosen type's
// block does not divide falls back (Q4_K→Q5_0, Q5_K→Q5_1, Q6_K→Q8_0,
// Q2_K/Q3_K→Q4_0, IQ4_XS→IQ4_NL, and F16 if even that does not fit).
type mixture struct {
	f             ftype
	gqa           int // query heads per KV head
	layers        int
	iAttnV, iDown int // tensors of the kind seen so far, in file order
}

func useMoreBits(i, n int) bool { return i < n/8 || i >= 7*n/8 || (i-n/8)%3 == 2 }

// typeOf returns the type of the matrix p (row length p.cols).
func (mx *mixture) typeOf(p tensorPlan) gguf.TensorType {
	t := mx.f.base
	if !t.Dequantizable() { // f32, f16, bf16: every matrix as is
		return t
	}
	if p.router {
		return gguf.TypeF32
	}
	id := mx.f.id
	switch name := p.name; {
	case name == "output.weight":
		switch {
		case uint64(p.cols)%t.BlockSize() != 0:
			t = gguf.TypeQ8_0
		case t != gguf.TypeQ8_0:
			t = gguf.TypeQ6_K
		}
	case name == "token_embd.weight":
	case strings.HasSuffix(name, "attn_v.weight"):
		i := mx.iAttnV
		mx.iAttnV++
		switch {
		case id == ftQ2K:
			t = gguf.TypeQ3_K
			if mx.gqa >= 4 {
				t = gguf.TypeQ4_K
			}
		case id == ftQ3KM:
			t = gguf.TypeQ4_K
			if i < 2 {
				t = gguf.TypeQ5_K
			}
		case (id == ftIQ4NL || id == ftIQ4XS) && mx.gqa >= 4:
			t = gguf.TypeQ5_K
		case (id == ftQ4KM || id == ftQ5KM) && useMoreBits(i, mx.layers):
			t = gguf.TypeQ6_K
		case id == ftQ4KS && i < 4:
			t = gguf.TypeQ5_K
		}
	case strings.HasSuffix(name, "ffn_down.weight"):
		i, n := mx.iDown, mx.layers
		mx.iDown++
		switch {
		case id == ftQ2K:
			t = gguf.TypeQ3_K
		case id == ftQ3KM:
			t = gguf.TypeQ4_K
			if i < n/16 {
				t = gguf.TypeQ5_K
			}
		case id == ftQ4KM:
			if useMoreBits(i, n) {
				t = gguf.TypeQ6_K
			}
		case i < n/8 && (id == ftIQ4NL || id == ftIQ4XS):
			t = gguf.TypeQ5_K
		case id == ftQ5KM && useMoreBits(i, n):
			t = gguf.TypeQ6_K
		case id == ftQ4KS && i < n/8:
			t = gguf.TypeQ5_K
		}
	case strings.HasSuffix(name, "attn_output.weight"):
		switch id {
		case ftQ2K:
			t = gguf.TypeQ3_K
		case ftQ3KM:
			t = gguf.TypeQ4_K
		}
	}
	if uint64(p.cols)%t.BlockSize() != 0 {
		switch t {
		case gguf.TypeIQ4_XS:
			t = gguf.TypeIQ4_NL
		case gguf.TypeQ2_K, gguf.TypeQ3_K:
			t = gguf.TypeQ4_0
		case gguf.TypeQ4_K:
			t = gguf.TypeQ5_0
		case gguf.TypeQ5_K:
			t = gguf.TypeQ5_1
		case gguf.TypeQ6_K:
			t = gguf.TypeQ8_0
		}
		if uint64(p.cols)%t.BlockSize() != 0 {
			t = gguf.TypeF16
		}
	}
	return t
}
