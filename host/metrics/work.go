package metrics

import (
	"time"

	"github.com/kvhost/kvhost/host/kv/radix"
	"github.com/kvhost/kvhost/host/ledger"
)

// Work is the dashboard's view of the host's load at one instant: the
// engine's state and the request counters since start. Rates (tokens/s)
// are left to the reader, which divides the difference of two snapshots by
// the difference of their times.
type Work struct {
	Time             time.Time       `json:"time"`
	Running          int             `json:"running"`
	Waiting          int             `json:"waiting"`
	Preemptions      int64           `json:"preemptions"`
	Steps            int64           `json:"steps"`
	GraphSteps       int64           `json:"graph_steps"`
	EagerDecodeSteps int64           `json:"eager_decode_steps"`
	KVUsage          *float64        `json:"kv_usage"` // null when unknown
	KVPools          []ledger.KVPool `json:"kv_pools"`
	Requests         int64           `json:"requests"`
	Errors           int64           `json:"errors"`
	TokensIn         int64           `json:"tokens_in"`
	TokensOut        int64           `json:"tokens_out"`
	RecentErrors     []ErrorEvent    `json:"recent_errors"`
	// PrefixCache is the prefix cache's hit counters (tokens) and
	// contents, null when it is off: the dashboard's hit rate.
	PrefixCache *radix.Usage `json:"prefix_cache"`
}

// Work reads the sources and counters once (the JSON behind the
// dashboard's Work and live KV panels).
func (m *Metrics) Work() Work {
	w := Work{Time: time.Now(), Requests: m.nRequests.Load(), Errors: m.nErrors.Load(),
		TokensIn: m.nIn.Load(), TokensOut: m.nOut.Load(), RecentErrors: m.RecentErrors(), KVPools: []ledger.KVPool{}}
	var st Load
	if m.src.Engine != nil {
		st = m.src.Engine()
		w.Running, w.Waiting, w.Preemptions, w.Steps = st.Running, st.Waiting, st.Preemptions, st.Steps
		w.GraphSteps, w.EagerDecodeSteps = st.GraphSteps, st.EagerDecodeSteps
		w.PrefixCache = st.Prefix
	}
	if m.src.Ledger != nil {
		if p := m.src.Ledger.Snapshot().KVPools; p != nil {
			w.KVPools = p
		}
	}
	if u, ok := KVUsage(st, m.src.Engine != nil, w.KVPools); ok {
		w.KVUsage = &u
	}
	return w
}
