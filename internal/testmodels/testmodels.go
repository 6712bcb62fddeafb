// Package testmodels locates the small trained model the repository ships
// for tests and for `make run`: models/stories260K.gguf (Andrej Karpathy's
// stories260K, MIT; see models/README.md for its origin, license and
// checksum). Tests that used to need ../shared for it find it here, in any
// clone.
package testmodels

import (
	"errors"
	"os"
	"path/filepath"
)

// Stories260KSHA256 is the sha256 of models/stories260K.gguf.
const Stories260KSHA256 = "51786ade049e60dc0a6b6ee5ed1a93997a1d65b7259fe500d96621d38de38130"

// Root is the module root: the nearest directory at or above the working
// directory holding go.mod (go test runs in the package's directory).
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testmodels: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Stories260K is the path of models/stories260K.gguf.
func Stories260K() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "models", "stories260K.gguf")
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// MustStories260K is Stories260K for tests: a missing file is a failure
// (the model is tracked in the repository), not a skip.
func MustStories260K(t interface {
	Helper()
	Fatalf(string, ...any)
}) string {
	t.Helper()
	p, err := Stories260K()
	if err != nil {
		t.Fatalf("testmodels: models/stories260K.gguf is part of the repository: %v", err)
	}
	return p
}

// LlamaCpp is the folder of llama.cpp's CPU tools beside the repository
// (../shared/tools/llama.cpp: llama-quantize, llama-simple, …, run through
// its `run` wrapper), which cross-checks use as the reference; ok is false
// when it is absent, and such tests skip.
func LlamaCpp() (dir string, ok bool) {
	root, err := Root()
	if err != nil {
		return "", false
	}
	dir = filepath.Join(root, "..", "shared", "tools", "llama.cpp")
	if _, err := os.Stat(filepath.Join(dir, "run")); err != nil {
		return "", false
	}
	return dir, true
}
