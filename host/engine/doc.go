// Package engine runs many generation requests at once over one model and
// the KV pools its configurator declared (continuous batching).
//
// One goroutine owns the device: it admits waiting requests, builds each
// step's batch — every running decode contributes one token, and what is
// left of the step's token budget (the chunked-prefill size) goes to prompt
// chunks in arrival order — grows page tables, runs one forward, samples and
// streams tokens. A sequence holds one page table per token pool (full
// attention, sliding window, MLA latent) and one slot per state pool; a
// window pool's pages that fall out of the window are given back before
// each step (Trim), so a sequence holds at most window + chunk tokens of
// it. Admission checks every pool: the pages each token pool needs for the
// newcomer and, for a request of n choices, n slots of each state pool
// (taken at admission, handed to the forks with a copy of the state). A
// request that cannot get KV pages preempts the newest running sequence,
// which gives back its pages and slots and is recomputed later from its
// tokens; nothing is dropped. Cancelling a request's context frees its pages
// at the next step.
//
// With Config.PrefixCache the engine keeps a prefix cache (package radix,
// whose doc states the ownership and lock protocol this follows):
// admission matches a request's tokens but the last in the tree, shares
// the hit pages into its tables, locks the path and starts its prefill
// after them (an embedding, or prompt logprobs before the first wanted
// position, limits the match); a prefill inserts its whole blocks after
// every chunk, so concurrent requests with the same prefix share them, and
// moves the lock onto them; a request that shares a prefix an earlier
// running request is still prefilling waits for it instead of computing
// the same blocks beside it, and before its first chunk joins the longest
// prefix cached by then; n > 1 forks relock their parent's prefix;
// a finished or preempted sequence inserts what it computed and unlocks
// (preemption drops references, never cached pages). When a pool is short
// the unlocked least recently used cached leaves are evicted before any
// sequence is preempted, and admission counts them as free. A hit never
// writes a cached page: the cache holds whole blocks, so the first page a
// hit sequence writes is its own. Models with recurrent-state pools run
// without the cache (no state snapshots are taken). Config.Policy LPM
// admits the longest cached prefix first.
//
// Files: engine.go (configuration, submission, validation, sampling),
// schedule.go (admission, the step's batch, preemption), batch.go (running
// a batch, forks, emitting tokens), kvseq.go (what a sequence holds of the
// pools), prefix.go (the prefix cache and the admission policies).
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
// written (a window pool's, those a later query can read); when the engine
// is idle every page and slot is back on its pool's free list or held by
// the prefix cache alone (ResetPrefixCache and shutdown return those); each
// request's event channel receives tokens in order and is closed exactly
// once, after a final event that carries Done or Err.
package engine
