package engine

import (
	"context"
	"fmt"
)

// warmupPrompt is the prompt length of Warmup's request: a prefill of a
// few rows, then one decode step.
const warmupPrompt = 4

// Warmup serves one short request (a few prompt tokens of id 0, two
// generated tokens, the default sampling policy) and waits for it, so
// that what the first client request would otherwise pay once — the
// weights' pages faulted in from the mapped file, the KV and activation
// arenas' first touch, the batch-1 decode graph, the sampling plugin's
// first instance — is paid before the server says it is ready, as
// llama.cpp's and SGLang's warm-up runs do. The request leaves the prefix
// cache as it was (no lookup, no insert, no hit or query counted); it
// counts as the engine's steps, which it is. A context shorter than the
// request is not warmed.
func (e *Engine) Warmup(ctx context.Context) error {
	n := min(warmupPrompt, e.ctxLen-2)
	if n < 1 {
		return nil
	}
	st, err := e.submit(ctx, Request{Prompt: make([]int32, n), MaxTokens: 2, IgnoreEOS: true}, true)
	if err != nil {
		return fmt.Errorf("engine: warm-up: %w", err)
	}
	for ev := range st.Events {
		if ev.Err != nil {
			return fmt.Errorf("engine: warm-up: %w", ev.Err)
		}
	}
	return nil
}
