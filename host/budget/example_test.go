package budget_test

import (
	"errors"
	"fmt"

	"github.com/kvhost/kvhost/host/budget"
)

// Sizing Llama-3-8B on one H100 with SGLang's default f (spec §7 V2/V3).
func Example() {
	f := budget.MemFractionStatic(budget.ReserveInput{GPUMemMiB: 81559, TP: 1})
	kv, err := budget.KVBudget(budget.KVBudgetInput{PBytes: 84711309312, ABytes: 68629815296, MemFractionStatic: f})
	if err != nil {
		panic(err)
	}
	// Llama-3-8B's bf16 cell, as the mha configurator declares it (spec V1;
	// the host computes no cell size of its own).
	const cell = 131072
	tokens := budget.Tokens(kv.BudgetBytes, cell, 1, 0)
	reqs := budget.MaxRunningRequests(tokens, 8192, 0, 1)
	fmt.Println(f, kv.BudgetBytes, tokens, reqs, budget.ReqToTokenBytes(reqs, 8192, 0))
	// Output: 0.83 54228892712 413733 4096 134316048
}

// The V13 error path tells the operator which knob to turn.
func ExampleInsufficientMemoryError() {
	_, err := budget.KVBudget(budget.KVBudgetInput{PBytes: 78 << 30, ABytes: 8 << 30, MemFractionStatic: 0.85})
	var ime *budget.InsufficientMemoryError
	if errors.As(err, &ime) {
		fmt.Println(ime.Phase, ime.Knob, ime.Suggest)
		fmt.Println(err)
	}
	// Output:
	// kv-budget mem_fraction_static 0.898
	// budget: kv-budget ran out of memory: needs 12562779341 bytes, has 8589934592 bytes (short by 3972844749 bytes, 3.700 GiB); set mem_fraction_static to 0.898 (minimum 0.8974)
}
