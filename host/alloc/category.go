package alloc

// Category says what an allocation holds (ARCHITECTURE.md §3).
type Category uint8

// The seven categories the ledger explains memory by.
const (
	Weights Category = iota
	KVCache
	Activations
	Metadata // request tables, sampling buffers
	Workspace
	Graph
	Context // context and communication
	numCategories
)

var categoryNames = [numCategories]string{"weights", "kv_cache", "activations", "runtime_metadata", "workspace", "graph", "context"}

func (c Category) String() string {
	if c < numCategories {
		return categoryNames[c]
	}
	return "unknown"
}

// Categories lists every category in ledger order.
func Categories() []Category {
	out := make([]Category, numCategories)
	for i := range out {
		out[i] = Category(i)
	}
	return out
}
