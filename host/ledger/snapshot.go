package ledger

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
)

// KVPool is one KV pool's capacity and use (kind, tokens or slots, bytes,
// in use); the pools come from the configurator's declaration (host/kv).
type KVPool = kv.PoolStat

// Runtime is the caching allocator now and its peaks since start.
type Runtime struct {
	AllocatedBytes     int64 `json:"allocated_bytes"`
	ReservedBytes      int64 `json:"reserved_bytes"`
	PeakAllocatedBytes int64 `json:"peak_allocated_bytes"`
	PeakReservedBytes  int64 `json:"peak_reserved_bytes"`
	// BaselineReservedBytes is what the caching allocator held when serving
	// began; PeakAboveBaselineBytes = PeakReservedBytes − it is the runtime
	// peak the reserved slack must hold.
	BaselineReservedBytes  int64 `json:"baseline_reserved_bytes"`
	PeakAboveBaselineBytes int64 `json:"peak_above_baseline_bytes"`
}

// Snapshot is the ledger at one instant: GET /v1/memory's body.
type Snapshot struct {
	Device         device.Info `json:"device"`
	TotalBytes     int64       `json:"total_bytes"`
	FreeBytes      int64       `json:"free_bytes"`
	StartFreeBytes int64       `json:"start_free_bytes"`
	Unit           string      `json:"unit"`
	Phases         []Phase     `json:"phases"`
	// Allocators lists every holder of device memory, "outside" last.
	Allocators []Usage `json:"allocators"`
	// ByCategory sums the allocators' categories (plus "cached" and
	// "rounding").
	ByCategory map[string]int64 `json:"by_category"`
	KVPools    []KVPool         `json:"kv_pools"`
	Budget     any              `json:"budget,omitempty"`
	Runtime    *Runtime         `json:"runtime,omitempty"`
	// OOM lists recent out-of-memory diagnoses: stage, tokens, whether
	// input logprobs or an eager batch were involved, allocator state, and
	// the knob to turn.
	OOM any `json:"oom_diagnoses,omitempty"`
}

// Outside is the "outside" allocator's bytes.
func (s Snapshot) Outside() int64 {
	for _, u := range s.Allocators {
		if u.Kind == KindOutside {
			return u.DeviceBytes
		}
	}
	return 0
}

// Snapshot reads the device and every source. Readings are not atomic with
// respect to a running engine; at rest they are exact.
func (l *Ledger) Snapshot() Snapshot {
	l.mu.Lock()
	sources := append([]Source(nil), l.sources...)
	pools := l.pools
	s := Snapshot{Device: l.dev.Info(), StartFreeBytes: l.start, Unit: "bytes; GiB = 2^30 B", Phases: append([]Phase(nil), l.phases...), Budget: l.budget}
	rt, diags, base := l.runtime, l.diags, l.base
	l.mu.Unlock()
	if diags != nil {
		s.OOM = diags()
	}
	var held int64
	for _, src := range sources {
		for _, u := range src.Usage() {
			s.Allocators = append(s.Allocators, u)
			held += u.DeviceBytes
		}
	}
	s.FreeBytes, s.TotalBytes = l.dev.MemGetInfo()
	out := NewUsage("outside", KindOutside)
	out.DeviceBytes = s.TotalBytes - s.FreeBytes - held
	out.Categories[alloc.Context.String()] = out.DeviceBytes
	s.Allocators = append(s.Allocators, out)
	s.ByCategory = map[string]int64{"cached": 0, "rounding": 0}
	for _, u := range s.Allocators {
		for k, v := range u.Categories {
			s.ByCategory[k] += v
		}
		s.ByCategory["cached"] += u.Cached
		s.ByCategory["rounding"] += u.Rounding
	}
	if pools != nil {
		s.KVPools = pools()
	}
	if rt != nil {
		st := rt.Stats()
		s.Runtime = &Runtime{AllocatedBytes: st.Allocated, ReservedBytes: st.Reserved, PeakAllocatedBytes: st.PeakAllocated, PeakReservedBytes: st.PeakReserved,
			BaselineReservedBytes: base.Reserved, PeakAboveBaselineBytes: max(0, st.PeakReserved-base.Reserved)}
	}
	return s
}

// Check verifies the ledger invariants on a snapshot: the phases chain and
// Σ Δ + final free = start free; every allocator is fully explained;
// Σ allocator bytes + outside = total − free with outside ≥ 0.
func Check(s Snapshot) error {
	if len(s.Phases) > 0 {
		var sum int64
		prev := s.StartFreeBytes
		for _, p := range s.Phases {
			if p.FreeBefore != prev || p.Delta != p.FreeBefore-p.FreeAfter {
				return fmt.Errorf("ledger: phase %q does not chain: before %d (previous after %d), after %d, delta %d", p.Name, p.FreeBefore, prev, p.FreeAfter, p.Delta)
			}
			sum += p.Delta
			prev = p.FreeAfter
		}
		if res := s.StartFreeBytes - (sum + prev); res != 0 {
			return fmt.Errorf("ledger: phases do not balance: start %d − (ΣΔ %d + final %d) = %d", s.StartFreeBytes, sum, prev, res)
		}
	}
	var held int64
	for _, u := range s.Allocators {
		if e := u.Explained(); e != u.DeviceBytes {
			return fmt.Errorf("ledger: allocator %q holds %d bytes but explains %d", u.Name, u.DeviceBytes, e)
		}
		held += u.DeviceBytes
	}
	if used := s.TotalBytes - s.FreeBytes; held != used {
		return fmt.Errorf("ledger: allocators hold %d bytes, the device reports %d used", held, used)
	}
	if o := s.Outside(); o < 0 {
		return fmt.Errorf("ledger: allocators claim %d bytes more than the device reports used", -o)
	}
	return nil
}

// Handler serves the snapshot as JSON (GET /v1/memory).
func (l *Ledger) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, `{"error":{"message":"use GET","type":"invalid_request_error"}}`, http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(l.Snapshot())
	})
}

func gib(n int64) string { return fmt.Sprintf("%.3f", float64(n)/GiB) }

// WriteTable prints the phases, allocators × categories and KV pools as
// aligned text.
func WriteTable(w io.Writer, s Snapshot) error {
	tw := tabwriter.NewWriter(w, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "phase\tavail GiB\tusage GiB\tdelta bytes\t\n")
	for _, p := range s.Phases {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%d\t\n", p.Name, p.AvailGiB, p.UsageGiB, p.Delta)
	}
	fmt.Fprintf(tw, "\t\t\t\t\n")
	cats := alloc.Categories()
	fmt.Fprintf(tw, "allocator\tdevice bytes\t")
	for _, c := range cats {
		fmt.Fprintf(tw, "%s\t", c)
	}
	fmt.Fprintf(tw, "cached\trounding\t\n")
	for _, u := range s.Allocators {
		fmt.Fprintf(tw, "%s\t%d\t", u.Name, u.DeviceBytes)
		for _, c := range cats {
			fmt.Fprintf(tw, "%d\t", u.Categories[c.String()])
		}
		fmt.Fprintf(tw, "%d\t%d\t\n", u.Cached, u.Rounding)
	}
	fmt.Fprintf(tw, "\t\t\t\t\n")
	for _, p := range s.KVPools {
		if p.Unit == "request" {
			fmt.Fprintf(tw, "KV pool %s (%s)\t%d slots\t\t%d B/slot\t%s GiB\t%d used\t\n", p.Name, p.Kind, p.Slots, p.CellBytes, gib(p.Bytes), p.UsedSlots)
			continue
		}
		kind := string(p.Kind)
		if p.Window > 0 {
			kind = fmt.Sprintf("%s %d", p.Kind, p.Window)
		}
		fmt.Fprintf(tw, "KV pool %s (%s, %s)\t%d tokens\t%d pages of %d\t%d B/token\t%s GiB\t%d used\t\n", p.Name, kind, p.DType, p.CapacityTokens, p.Pages, p.PageSize, p.CellBytes, gib(p.Bytes), p.UsedTokens)
	}
	fmt.Fprintf(tw, "total\t%d\tfree %d\t(GiB = 2^30 B)\t\n", s.TotalBytes, s.FreeBytes)
	return tw.Flush()
}
