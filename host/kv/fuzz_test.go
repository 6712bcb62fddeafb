package kv_test

import (
	"encoding/json"
	"testing"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/kv"
	"github.com/kvhost/kvhost/host/kv/kvtest"
	"github.com/kvhost/kvhost/sdk"
)

// FuzzNewLayout feeds NewLayout declarations a plugin could make (it is
// untrusted): it never panics, and a declaration it accepts realises into
// device views that validate, with every layer that keeps a cache served.
func FuzzNewLayout(f *testing.F) {
	needs := kvtest.Uniform(3, 2, 32)
	needs = append(needs, kv.LayerNeed{State: true})
	for _, dt := range []string{sdk.KVFP32, sdk.KVBF16, sdk.KVMXFP8, sdk.KVNVFP4} {
		d, err := kvtest.DeclareMHA(needs[:3], dt, 4)
		if err != nil {
			f.Fatal(err)
		}
		d = append(d, sdk.Pool{Name: "s", Kind: sdk.RecurrentState, PageSize: 1, BytesPerUnit: 8, Buffers: []sdk.Buffer{
			{Pool: "s", Name: "conv", Role: sdk.RoleConv, Layer: 3, Shape: []int64{1}, DType: "fp32"},
			{Pool: "s", Name: "ssm", Role: sdk.RoleSSM, Layer: 3, Shape: []int64{1}, DType: "fp32"}}})
		b, _ := json.Marshal(d)
		f.Add(b)
		b, _ = json.Marshal(kvtest.Split(d, func(l int) bool { return l == 1 }))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var decl []sdk.Pool
		if json.Unmarshal(raw, &decl) != nil {
			return
		}
		l, err := kv.NewLayout(decl, needs)
		if err != nil {
			return
		}
		units := make([]int, len(l.Pools))
		for i, p := range l.Pools {
			units[i] = 1
			if p.Tokens() {
				units[i] = p.PageSize
			}
		}
		if l.Bytes(units) > 1<<30 {
			return
		}
		// Fake backing: every span non-nil and exactly long enough.
		s, err := kv.Over(l, units, func(_, _ int, n int64) (device.Span, error) { return device.Span{Ptr: 4096, Bytes: n}, nil })
		if err != nil {
			t.Fatalf("accepted declaration does not realise: %v", err)
		}
		for i, n := range needs {
			if n.KVHeads > 0 {
				if s.Table(i) < 0 || s.Layer(i).Validate() != nil {
					t.Fatalf("layer %d: table %d, %v", i, s.Table(i), s.Layer(i).Validate())
				}
			}
			if _, ok := s.State(i); ok != n.State {
				t.Fatalf("layer %d: state %v", i, ok)
			}
		}
	})
}
