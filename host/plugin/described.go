package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// DescribedFile is the file in a built-in set that holds each
// configurator's Describe answer, taken at build time (make plugins runs
// scripts/describe-builtins over the built modules): its kind and
// descriptor, keyed by file name and tagged with the sha256 of the bytes
// described. Without it the first start on an empty cache interpreted
// every configurator up to the claimant just to read its descriptor —
// each a ~70 MiB interpreter compile of a 3.5 MB Go guest — and then the
// claimant a second time to load it. A registry seeds its records with
// the entries whose sha256 is the one SumsFile lists for the file (a
// stale entry is ignored and the module described as before), so the
// first start compiles the claimant alone; the descriptor is trusted no
// further than Describe's: the load shakes hands again.
const DescribedFile = "DESCRIBED.json"

// Described is one DescribedFile entry.
type Described struct {
	SHA256     string          `json:"sha256"`
	Kind       string          `json:"kind"`
	Descriptor json.RawMessage `json:"descriptor"`
}

// DescribeSet describes every configurator in fsys (the *.wasm files at
// its root) with rt's Describe (the interpreter, or rt's records) and
// returns the DescribedFile contents; modules of other kinds are left
// out, a configurator that fails to describe is an error.
func DescribeSet(ctx context.Context, rt *Runtime, fsys fs.FS) ([]byte, error) {
	names, err := fs.Glob(fsys, "*.wasm")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	set := map[string]Described{}
	for _, file := range names {
		wasm, err := fs.ReadFile(fsys, file)
		if err != nil {
			return nil, err
		}
		name := strings.TrimSuffix(file, ".wasm")
		if kind, err := rt.KindOf(name, wasm); err != nil || kind != KindConfigurator {
			continue
		}
		kind, raw, err := rt.Describe(ctx, name, wasm)
		if err != nil {
			return nil, err
		}
		set[file] = Described{SHA256: sum256(wasm), Kind: kind, Descriptor: raw}
	}
	return json.MarshalIndent(set, "", "  ")
}

// readDescribed parses fsys's DescribedFile (none: an empty set).
func readDescribed(fsys fs.FS) (map[string]Described, error) {
	b, err := fs.ReadFile(fsys, DescribedFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("plugin: built-in %s: %w", DescribedFile, err)
	}
	var set map[string]Described
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("plugin: built-in %s: %w", DescribedFile, err)
	}
	return set, nil
}

// seedDescribed records the build-time Describe answers of the built-ins
// whose listed sha256 they were taken from, where no record exists yet:
// what Describe would have recorded on this start.
func (r *Registry) seedDescribed(set map[string]Described) {
	if r.rt.disk == nil {
		return
	}
	for _, src := range r.builtins {
		d, ok := set[src.file]
		if !ok || src.sha == "" || d.SHA256 != src.sha || d.Kind == "" {
			continue
		}
		if _, ok := r.rt.disk.get(src.sha); ok {
			continue
		}
		var raw bytes.Buffer // as the guest wrote it: DescribedFile is indented
		if json.Compact(&raw, d.Descriptor) == nil {
			r.rt.disk.put(src.sha, record{Kind: d.Kind, Descriptor: raw.Bytes()})
		}
	}
}
