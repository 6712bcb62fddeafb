package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/kvhost/kvhost/host/model/gguf"
)

// splitGenerated rewrites the GGUF gen-model wrote at out as llama.cpp
// gguf-split shards OUT-00001-of-0000N.gguf … within lim and removes out.
func splitGenerated(out string, lim gguf.SplitLimits, stdout io.Writer) error {
	shards, err := gguf.SplitFile(out, strings.TrimSuffix(out, ".gguf"), lim)
	if err != nil {
		return fmt.Errorf("gen-model: %w", err)
	}
	if err := os.Remove(out); err != nil {
		return fmt.Errorf("gen-model: %w", err)
	}
	for _, s := range shards {
		st, err := os.Stat(s)
		if err != nil {
			return fmt.Errorf("gen-model: %w", err)
		}
		fmt.Fprintf(stdout, "wrote %s (%.1f MiB)\n", s, float64(st.Size())/(1<<20))
	}
	fmt.Fprintf(stdout, "%d shards replace %s; load the model from any of them\n", len(shards), out)
	return nil
}
