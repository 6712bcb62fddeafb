// Package sampling turns rows of logits into next tokens.
//
// Two paths share one random stream, Rand(seed, step), so a seeded request
// gets the same tokens whatever else shares its batch:
//
//   - Sampler: the host-native standard sampler (temperature, top-k, top-p,
//     min-p) and LogSoftmaxAt, used by the engine directly.
//   - Registry: sampling policies as WebAssembly plugins (sampler ABI 1,
//     sdk/SAMPLER_ABI.md), chosen per request by name, hot-swappable. The
//     plugins run on host/plugin's runtime (the sampler kind's adapter,
//     plugin.Sampler); their sources — built-ins and the plugins folder —
//     and allow-list come from the one plugin.Registry of every kind.
//
// The Registry API the engine and server use:
//
//	reg, err := sampling.NewRegistry(ctx, sampling.Options{Plugins: preg, Default: "standard"})
//	c, err := reg.ValidateParams("typical", map[string]any{"typical_p": 0.9})
//	    // *ParamError / *UnknownPolicyError: HTTP 400
//	seqs[i] = sampling.SeqState{Params: c, Seed: seed, Step: n, Generated: toks, Bias: sampling.NormalizeBias(lb)}
//	err = reg.SampleBatch(ctx, "typical", rows, seqs, out) // once per step per policy
//	reg.Swap(ctx, name, wasm, sampling.SourceUpload)       // PUT /admin/samplers/{name}
//	reg.Remove(name); reg.List(); stop := reg.Watch(ctx, dir, time.Second)
//	    // Remove of the default: *DefaultPolicyError (HTTP 409)
//
// Per step, for each row, the host runs the pre-ops the policy declared
// (penalties over the generated tokens, logit bias, temperature, top-k,
// top-p, min-p) where the logits live, and cuts to the policy's K
// candidates: one pass over the row with a K-entry heap, reading the
// touched tokens' adjusted logits from a sorted side list, so the
// vocabulary is never copied or modified (greedy is K = 1: an argmax).
// Candidates reach the guest sorted by descending logit with their
// log-softmax over the candidates; the guest writes one token per row into
// the buffers it allocated once; the host checks every answer against its
// own copy of the candidates.
//
// Output constraints reach sampling through ApplyMask, which the engine
// runs on a row before anything here reads it: refused tokens become -Inf,
// so every pre-op, the cut to K and every policy see allowed tokens only.
//
// Invariants:
//   - A step holds one reference to the policy version current when it
//     began and runs entirely on it; Swap publishes a new version
//     (plugin.Current) after plugin.Runtime.LoadSampler has validated,
//     compiled, handshaken and self-tested it, and the old version closes
//     when its last step releases it. A refused version never serves; the
//     old one keeps on. The default policy cannot be removed.
//   - Readers (SampleBatch, ValidateParams, List) take no lock; writers
//     (Swap, Remove) serialise on a mutex and replace the name map
//     copy-on-write.
//   - SampleBatch allocates nothing in steady state: scratch is pooled,
//     parameters are resolved once per schema and cached in SeqState.
//   - Runaway guests are bounded by fuel and a step deadline, memory- and
//     table-hungry ones by their caps (package plugin): a step that fails
//     fails that step only. It is logged and counted (Info.Failures,
//     Info.Fallbacks; the kvhost_sampler_fallbacks_total metric), and its rows are
//     served at once by the default policy; if the default cannot
//     (it is the policy, is disabled or fails too) SampleBatch answers
//     ErrHostFallback and the engine samples them with its host Sampler. No
//     request fails because a plugin did.
//
// Request fields (issue 12; issue 13 item 8). This package owns the one
// mapping from a request's sampling fields to the sampler: Fields (the
// JSON the server embeds) → Fields.Request (OpenAI's defaults, ranges
// from sdk/sampler.PreOpParams, a *FieldError naming the field) →
// Registry.Compile (the fields a policy declares join its parameters;
// a set field it does not take is a *ParamError, never dropped) →
// NewSeqState (the per-sequence state both paths read). UsesPolicy says
// which path a request takes: a greedy request naming no policy is an
// argmax on the host (Sampler.SampleSeq), everything else a policy.
// The server compiles before admission (400s); the engine compiles only
// what reaches it uncompiled, with the same function.
//
// Penalties and bias, on both paths, per row and step, in this order
// (vLLM's definitions; OpenAI's for the fields it has):
//   - repetition_penalty r (vLLM/SGLang; 1 = none, range [0.01, 10]):
//     every distinct token of the prompt or of the generated tokens has
//     its logit divided by r when positive, multiplied by r otherwise.
//   - frequency_penalty f and presence_penalty p ([-2, 2], 0 = none):
//     every token generated c > 0 times so far loses c·f + p. Prompt
//     tokens do not count (OpenAI and vLLM count the output only).
//   - logit_bias ({"token id": bias}, bias in [-100, 100], at most 300
//     entries; ids must be in the vocabulary, checked by the engine):
//     bias is added to the token's (penalised) logit. -100 bans a token
//     in practice, +100 forces it.
//   - then temperature, top-k, top-p, min-p as the policy declares.
//
// The logits are never copied or modified: adjusted values live in a
// sorted side list. Logprobs reported to the client are the model's,
// before pre-ops (vLLM's raw_logprobs).
//
// Governance (issue 7):
//   - The plugin registry's allow-list pins every module that is not a
//     built-in: Swap (uploads, folder files) refuses unlisted bytes with an
//     *allowlist.NotAllowedError before compiling them. The built-ins'
//     bytes are always trusted. SetAllowSHA256 replaces the list; Watch
//     calls it when Options.AllowlistFile changes (a plugin and its pin
//     can arrive in one ConfigMap update) and retries refused files.
//   - Watch follows symlinks and compares the resolved path, so a
//     Kubernetes ConfigMap volume (keys linked into ..data, swapped
//     atomically) delivers replaced files as well as new ones.
//   - Options.DisableAfter (default 3) consecutive guest faults disable a
//     policy version: it logs one Warn (policy, version, failures,
//     last_error), Info shows Disabled/DisabledAt/LastError, its name keeps
//     resolving, and SampleBatch serves its rows with the default policy
//     (Info.Fallbacks counts them) without calling it. If the default
//     cannot (it is disabled too, or is the policy), SampleBatch returns a
//     *PolicyDisabledError (ErrPolicyDisabled, ErrHostFallback) and the
//     engine samples with its host Sampler. A successful Swap of the name
//     publishes a fresh, enabled version.
//   - Watch reads the plugins folder as package plugin does (regular files
//     within the size cap) and leaves configurators to their registry.
package sampling
