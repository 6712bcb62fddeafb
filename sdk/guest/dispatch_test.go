package guest_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

// fixed is a configurator with one token pool of L layers × 2 × 1024 B.
type fixed struct{}

type fixedPlan struct{ layers int64 }

func (fixed) Describe() sdk.Descriptor {
	return sdk.Descriptor{Name: "fixed", Version: "0.1", Architectures: []string{"X"}}
}

func (fixed) Configure(in sdk.ConfigureInput) (guest.Plan, error) {
	if in.Host.KVDType == sdk.KVFP8E4M3 {
		return nil, fmt.Errorf("fixed: fp8 models are another plugin's: %w", sdk.ErrDeclined)
	}
	if in.Host.KVDType != sdk.KVBF16 {
		return nil, errors.New("fixed: bf16 only")
	}
	return fixedPlan{layers: 3}, nil
}

func (p fixedPlan) Pools() []sdk.Pool {
	pool := sdk.Pool{Name: "kv", Kind: sdk.FullAttention, PageSize: 1, BytesPerUnit: p.layers * 2048}
	for l := range p.layers {
		pool.Buffers = append(pool.Buffers,
			sdk.Buffer{Pool: "kv", Name: "k", Role: sdk.RoleK, Layer: int32(l), Shape: []int64{512}, DType: "bf16"},
			sdk.Buffer{Pool: "kv", Name: "v", Role: sdk.RoleV, Layer: int32(l), Shape: []int64{512}, DType: "bf16"})
	}
	return []sdk.Pool{pool}
}

func (p fixedPlan) Size(available, tokenCap, _ int64) (map[string]int64, error) {
	t := available / (p.layers * 2048)
	if tokenCap > 0 {
		t = min(t, tokenCap)
	}
	return map[string]int64{"kv": t}, nil
}

func TestDispatcher(t *testing.T) {
	rec := &guest.Recorder{}
	d := guest.NewDispatcher(fixed{}, rec)
	if got := string(d.DescribeJSON()); !strings.Contains(got, `"kind":"configurator","abi":2`) {
		t.Fatalf("descriptor %s lacks defaults", got)
	}
	if st := d.Size(1, 0, 0); st != sdk.StatusGuestError || !strings.Contains(d.LastError(), "before a successful configure") {
		t.Fatalf("size before configure: %d %q", st, d.LastError())
	}
	if st := d.Configure([]byte(`{"model":{},"host":{}}`)); st != sdk.StatusOK {
		t.Fatalf("configure: %d %s", st, d.LastError())
	}
	if len(rec.Pools) != 1 || len(rec.Pools[0].Buffers) != 6 || rec.Pools[0].Check() != nil {
		t.Fatalf("recorded %+v", rec.Pools)
	}
	if st := d.Size(6144*10+5, 0, 0); st != sdk.StatusOK || rec.Units["kv"] != 10 {
		t.Fatalf("size: %d %v", st, rec.Units)
	}
	if st := d.Configure([]byte(`{"model":{},"host":{"kv_dtype":"fp16"}}`)); st != sdk.StatusGuestError || d.LastError() != "fixed: bf16 only" {
		t.Fatalf("fp16: %d %q", st, d.LastError())
	}
	// A decline is its own status, with its text: the host asks the next
	// claimant.
	if st := d.Configure([]byte(`{"model":{},"host":{"kv_dtype":"fp8_e4m3"}}`)); st != sdk.StatusDeclined || d.LastError() != "fixed: fp8 models are another plugin's: declined" {
		t.Fatalf("declined configure: %d %q", st, d.LastError())
	}
	if st := d.Configure([]byte(`{"model":7}`)); st != sdk.StatusGuestError || !strings.Contains(d.LastError(), "JSON object") {
		t.Fatalf("bad input: %d %q", st, d.LastError())
	}
	// A host refusal surfaces as the guest's error.
	rec.Reset()
	rec.Pools = []sdk.Pool{{Name: "kv", Kind: sdk.FullAttention, PageSize: 1, BytesPerUnit: 1}}
	if st := d.Configure([]byte(`{"model":{},"host":{}}`)); st != sdk.StatusGuestError || !strings.Contains(d.LastError(), fmt.Sprint(sdk.StatusDuplicate)) {
		t.Fatalf("duplicate pool: %d %q", st, d.LastError())
	}
}

func ExampleNewDispatcher() {
	rec := &guest.Recorder{}
	d := guest.NewDispatcher(fixed{}, rec)
	d.Configure([]byte(`{"model":{},"host":{"kv_dtype":"bf16"}}`))
	d.Size(1<<20, 0, 0)
	fmt.Println(rec.Pools[0].Name, rec.Pools[0].BytesPerUnit, rec.Units["kv"])
	// Output: kv 6144 170
}
