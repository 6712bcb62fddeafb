package plan

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kvhost/kvhost/host/budget"
	"github.com/kvhost/kvhost/sdk"
)

// Fix is one setting, spelled as the command-line flag, that makes a plan
// fit.
type Fix struct {
	Flag  string `json:"flag"`
	Value string `json:"value"`
}

func (f Fix) String() string { return f.Flag + " " + f.Value }

// AdviceError is a plan that does not fit, with the settings found to fit:
// each Fix was applied alone to the same input and planned again, so
// following any of them gives a plan. It unwraps to the sizing error
// (a *budget.InsufficientMemoryError underneath).
type AdviceError struct {
	Err   error
	Fixes []Fix
}

func (e *AdviceError) Error() string {
	if len(e.Fixes) == 0 {
		return e.Err.Error() + "; no single setting of --mem-fraction-static, --max-running-requests, --logprob-chunk-size, --chunked-prefill-size, --context-length, --kv-cache-dtype or --tp was found to fit"
	}
	s := make([]string, len(e.Fixes))
	for i, f := range e.Fixes {
		s[i] = f.String()
	}
	return e.Err.Error() + "; each of these plans: " + strings.Join(s, " | ")
}

func (e *AdviceError) Unwrap() error { return e.Err }

// Apply returns in with the fix applied, or false when the flag is not one
// advice uses or the value does not parse.
func (f Fix) Apply(in GPUInput) (GPUInput, bool) {
	n, ierr := strconv.Atoi(f.Value)
	switch f.Flag {
	case "--mem-fraction-static":
		v, err := strconv.ParseFloat(f.Value, 64)
		if err != nil {
			return in, false
		}
		in.MemFractionStatic = v
	case "--max-running-requests":
		in.MaxRunning = n
	case "--context-length":
		in.ContextLen = n
	case "--logprob-chunk-size":
		in.LogprobChunk = n
	case "--chunked-prefill-size":
		in.ChunkedPrefill = n
	case "--tp":
		in.TP = n
	case "--kv-cache-dtype":
		in.KVCacheDType = f.Value
		return in, true
	default:
		return in, false
	}
	return in, ierr == nil || f.Flag == "--mem-fraction-static"
}

// advise turns a sizing error into an *AdviceError with every candidate
// setting that plans: the fraction the error names (raised a thousandth at
// a time until it plans), fewer running requests, smaller logprob or
// prefill chunks, a shorter context, an 8-bit KV cache, more tensor
// parallelism (only when A was not measured, since it depends on the
// weights per rank).
func advise(in GPUInput, r GPUReport, err error) error {
	var ime *budget.InsufficientMemoryError
	if !errors.As(err, &ime) {
		return err
	}
	plans := func(f Fix) bool {
		in2, ok := f.Apply(in)
		if !ok {
			return false
		}
		_, e := planGPUOnce(in2)
		return e == nil
	}
	var fixes []Fix
	add := func(f Fix) bool {
		if plans(f) {
			fixes = append(fixes, f)
			return true
		}
		return false
	}
	if ime.Knob == "--mem-fraction-static" && ime.SuggestValue < 1 {
		for v := ime.SuggestValue; v <= 1; v = fractionCeil(v + 0.001) {
			if add(Fix{"--mem-fraction-static", fmt.Sprintf("%.3f", v)}) {
				break
			}
		}
	}
	if ime.Knob == "--mem-fraction-static" && ime.Phase == "runtime-headroom" && ime.SuggestValue > 0 {
		for v := ime.SuggestValue; v > 0; v = fractionFloor(v - 0.001) {
			if add(Fix{"--mem-fraction-static", fmt.Sprintf("%.3f", v)}) {
				break
			}
		}
	}
	d, derr := in.withDefaults()
	if derr != nil {
		return &AdviceError{Err: err, Fixes: fixes}
	}
	if !in.SGLangCompat { // SGLang's budget does not depend on these two
		if rows := max(in.MaxRunning, r.Admission.Admitted); rows > 1 {
			// Planning is monotone in the batch: search the largest that fits.
			b := sort.Search(rows-1, func(b int) bool { return !plans(Fix{"--max-running-requests", strconv.Itoa(b + 1)}) })
			if b >= 1 {
				fixes = append(fixes, Fix{"--max-running-requests", strconv.Itoa(b)})
			}
		}
		// The prefill moments shrink with the logprob chunk and the chunk.
		for v := d.LogprobChunk / 2; v >= 64; v /= 2 {
			if add(Fix{"--logprob-chunk-size", strconv.Itoa(v)}) {
				break
			}
		}
		c := d.ChunkedPrefill
		if c == 0 {
			c = budget.ChunkedPrefillSize(float64(resolveDevice(d).TotalBytes) / budget.MiB)
		}
		for v := c / 2; v >= 256; v /= 2 {
			if add(Fix{"--chunked-prefill-size", strconv.Itoa(v)}) {
				break
			}
		}
		if c := d.ContextLen; c > d.PageSize {
			n := sort.Search(c-1, func(n int) bool { return !plans(Fix{"--context-length", strconv.Itoa(n + 1)}) })
			if n >= 1 {
				fixes = append(fixes, Fix{"--context-length", strconv.Itoa(n)})
			}
		}
	}
	switch d.KVCacheDType {
	case sdk.KVBF16, sdk.KVFP16, sdk.KVFP32:
		add(Fix{"--kv-cache-dtype", "fp8_e4m3"})
	}
	if len(in.FreeAtKVSizing) == 0 && len(in.FreeBeforeWeights) <= 1 {
		for tp := 2 * d.TP; tp <= 8; tp *= 2 {
			if add(Fix{"--tp", strconv.Itoa(tp)}) {
				break
			}
		}
	}
	return &AdviceError{Err: err, Fixes: fixes}
}
