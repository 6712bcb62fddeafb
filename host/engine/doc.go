// Package engine runs many generation requests at once over one model and
// one shared paged KV pool (continuous batching).
//
// One goroutine owns the device: it admits waiting requests, builds each
// step's batch — every running decode contributes one token, and what is
// left of the step's token budget (the chunked-prefill size) goes to prompt
// chunks in arrival order — grows page tables, runs one forward, samples and
// streams tokens. A request that cannot get KV pages preempts the newest
// running sequence, which is recomputed later from its tokens; nothing is
// dropped. Cancelling a request's context frees its pages at the next step.
//
// A request with an output constraint (Request.Constraint, package
// constraint) opens its state at Submit (a spec the runner refuses is an
// *InvalidRequestError); each step, before anything samples, every
// constrained row consumes its sequence's last token and gets the mask
// applied to its logits in place, so the host sampler, the argmax and
// every policy plugin see only allowed tokens. Logprobs are those of the
// masked distribution. n > 1 choices fork the state before their first
// token.
//
// Invariants: a sequence's pages cover exactly the tokens whose K/V were
// written; when the engine is idle every page is back on the pool's free
// list; each request's event channel receives tokens in order and is closed
// exactly once, after a final event that carries Done or Err.
package engine
