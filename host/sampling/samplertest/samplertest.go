// Package samplertest helps tests and load tests exercise sampler hot swap:
// it derives new versions of a sampler binary (a same-length edit of the
// version string in its descriptor, so the module stays valid), broken
// versions the host must refuse, and drives a swap churn while the caller
// runs traffic.
package samplertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"
)

var versionKey = []byte(`"version":"`)

// Variant returns wasm with its descriptor's version replaced by version,
// which must be as long as the original (e.g. "1.0.0" → "1.0.7").
func Variant(wasm []byte, version string) ([]byte, error) {
	i := bytes.Index(wasm, versionKey)
	if i < 0 {
		return nil, fmt.Errorf("samplertest: no %s in the module", versionKey)
	}
	start := i + len(versionKey)
	end := bytes.IndexByte(wasm[start:], '"')
	if end < 0 {
		return nil, fmt.Errorf("samplertest: unterminated version")
	}
	if end != len(version) {
		return nil, fmt.Errorf("samplertest: version %q must be %d bytes like %q", version, end, wasm[start:start+end])
	}
	out := bytes.Clone(wasm)
	copy(out[start:], version)
	return out, nil
}

// Version is the Choice.Version string a host reports for wasm loaded
// with descriptor version version.
func Version(wasm []byte, version string) string {
	sum := sha256.Sum256(wasm)
	return version + "+" + hex.EncodeToString(sum[:])[:12]
}

// Broken returns two versions of wasm the host must refuse: a truncated
// module (decode) and one whose descriptor kind is wrong (describe).
func Broken(wasm []byte) [][]byte {
	truncated := bytes.Clone(wasm[:len(wasm)*2/3])
	badKind := bytes.Replace(wasm, []byte(`"kind":"sampler"`), []byte(`"kind":"samplex"`), 1)
	return [][]byte{truncated, badKind}
}

// Plan is a churn: Swaps good versions and Broken refused uploads of
// sampler Name, derived from Base, every Interval, through Swap (the
// registry's Swap, or an HTTP PUT to /admin/samplers/{name}).
type Plan struct {
	Name     string
	Base     []byte
	Swaps    int
	Broken   int
	Interval time.Duration
	Swap     func(ctx context.Context, name string, wasm []byte) error
	// OnSwap, if set, runs after each accepted swap with the version
	// string steps must report from then on.
	OnSwap func(version string)
}

// Report is what a churn did.
type Report struct {
	Versions []string // accepted, in order
	Refused  []error  // one per broken upload
}

// Churn runs the plan. It fails if a good version is refused or a broken
// one accepted. Broken uploads are spread evenly among the swaps.
func Churn(ctx context.Context, p Plan) (Report, error) {
	var rep Report
	broken := Broken(p.Base)
	nb := 0
	i := bytes.Index(p.Base, versionKey)
	if i < 0 {
		return rep, fmt.Errorf("samplertest: no %s in the base module", versionKey)
	}
	width := bytes.IndexByte(p.Base[i+len(versionKey):], '"')
	for s := 1; s <= p.Swaps; s++ {
		if p.Interval > 0 {
			select {
			case <-ctx.Done():
				return rep, ctx.Err()
			case <-time.After(p.Interval):
			}
		}
		v := fmt.Sprintf("9.%0*d", width-2, s)
		wasm, err := Variant(p.Base, v)
		if err != nil {
			return rep, err
		}
		if err := p.Swap(ctx, p.Name, wasm); err != nil {
			return rep, fmt.Errorf("samplertest: swap %d (%s) refused: %w", s, v, err)
		}
		ver := Version(wasm, v)
		rep.Versions = append(rep.Versions, ver)
		if p.OnSwap != nil {
			p.OnSwap(ver)
		}
		for nb < p.Broken && nb*p.Swaps < s*p.Broken {
			err := p.Swap(ctx, p.Name, broken[nb%len(broken)])
			if err == nil {
				return rep, fmt.Errorf("samplertest: broken upload %d was accepted", nb+1)
			}
			rep.Refused = append(rep.Refused, err)
			nb++
		}
	}
	return rep, nil
}
