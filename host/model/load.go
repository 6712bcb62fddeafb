package model

import (
	"fmt"
	"os"
)

// Load loads a GGUF file or a Hugging Face directory onto o.Device.
func Load(path string, o Options) (*Model, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if st.IsDir() {
		return LoadHF(path, o)
	}
	return LoadGGUF(path, o)
}
