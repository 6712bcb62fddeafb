package cpu

// Activations beyond SiLU·mul (ops.go) for Gemma, gpt-oss and soft-capped
// logits. Each has an AVX2 path (silu_amd64.s, act_amd64.go) over the
// leading multiple of 8 and this portable one for the tail and other CPUs;
// both evaluate exp with the same Cephes polynomial (expf), so they agree
// to rounding. NaN inputs give unspecified results.

// gelu's tanh approximation written as a sigmoid:
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) = x·σ(x·(geluC1 + geluC2·x²)),
// since (1 + tanh(u))/2 = σ(2u).
const (
	geluC1 = 1.5957691216057308  // 2·√(2/π)
	geluC2 = 0.07135481627159357 // 2·√(2/π)·0.044715
)

// GeGLUTanh sets out = gelu_tanh(gate)·up elementwise over len(out) (Gemma's
// gelu_pytorch_tanh MLP; GGUF models run ggml's geglu, the same function).
// out may alias gate or up.
func GeGLUTanh(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	n := gegluVec(out, gate, up)
	gegluGo(out[n:], gate[n:], up[n:])
}

func gegluGo(out, gate, up []float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i := range out {
		g := gate[i]
		out[i] = g / (1 + expf(-g*(geluC1+geluC2*g*g))) * up[i]
	}
}

// SwiGLUOAI sets out = g·σ(alpha·g)·(u+1) with g = min(gate, limit) and u =
// up clamped to [-limit, limit], elementwise over len(out): gpt-oss's expert
// activation (HF GptOssExperts._apply_gate with alpha 1.702 and limit
// swiglu_limit 7.0; ggml's swiglu_oai). The experts' gate and up rows are
// interleaved in the HF checkpoint (gate_up_proj[..., ::2] and [..., 1::2]);
// llama.cpp's converter splits them, and a loader must too, so gate and up
// here are separate spans. out may alias gate or up.
func SwiGLUOAI(out, gate, up []float32, alpha, limit float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	n := swigluOAIVec(out, gate, up, alpha, limit)
	swigluOAIGo(out[n:], gate[n:], up[n:], alpha, limit)
}

func swigluOAIGo(out, gate, up []float32, alpha, limit float32) {
	gate, up = gate[:len(out)], up[:len(out)]
	for i := range out {
		g, u := gate[i], up[i]
		if g > limit {
			g = limit
		}
		if u > limit {
			u = limit
		}
		if u < -limit {
			u = -limit
		}
		out[i] = g / (1 + expf(-alpha*g)) * (u + 1)
	}
}

// SoftCap replaces each x by cap·tanh(x/cap) (Gemma 2's final-logit
// soft-capping, final_logit_softcapping 30; the attention logits' cap is the
// attention kernel's AttnOpts.SoftCap), computed as cap·(2·σ(2x/cap) − 1):
// accurate to about 2e-7·cap absolute near 0. cap must be positive.
func SoftCap(x []float32, cap float32) {
	if !(cap > 0) {
		panic("cpu: soft cap must be positive")
	}
	k := -2 / cap
	n := softcapVec(x, k, cap)
	softcapGo(x[n:], k, cap)
}

func softcapGo(x []float32, k, cap float32) {
	for i, v := range x {
		x[i] = cap * (2/(1+expf(k*v)) - 1)
	}
}

// Scale multiplies x by s in place (Gemma's embedding scale √hidden_size,
// Granite's embedding multiplier and its 1/logits_scaling).
func Scale(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}
