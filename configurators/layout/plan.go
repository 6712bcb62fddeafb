package layout

import (
	"fmt"
	"math"

	"github.com/kvhost/kvhost/sdk"
	"github.com/kvhost/kvhost/sdk/guest"
)

// Pool names shared by the built-in configurators.
const (
	PoolKV    = "kv"    // token KV of full-attention layers
	PoolFull  = "full"  // SWA models: full-attention layers
	PoolSWA   = "swa"   // SWA models: sliding-window layers
	PoolState = "state" // Mamba/linear-attention state slots, one per request
)

// Plan is a configured layout; it implements guest.Plan.
type Plan struct {
	pools []sdk.Pool
	size  func(available, tokenCap, requestCap int64) (map[string]int64, error)
}

var _ guest.Plan = (*Plan)(nil)

// Pools returns the declared pools.
func (p *Plan) Pools() []sdk.Pool { return p.pools }

// Size returns the units per pool.
func (p *Plan) Size(available, tokenCap, requestCap int64) (map[string]int64, error) {
	if available < 0 || tokenCap < 0 || requestCap < 0 {
		return nil, fmt.Errorf("layout: size(%d, %d, %d): arguments must be >= 0", available, tokenCap, requestCap)
	}
	return p.size(available, tokenCap, requestCap)
}

// Pool returns the named pool.
func (p *Plan) Pool(name string) (sdk.Pool, bool) {
	for _, q := range p.pools {
		if q.Name == name {
			return q, true
		}
	}
	return sdk.Pool{}, false
}

// poolBuilder accumulates buffers and their byte sum; the first error
// (overflow, too many buffers) sticks and is returned by done.
type poolBuilder struct {
	pool sdk.Pool
	err  error
}

// newPool starts a pool of a kind: page is its page size in tokens (1 for
// a state pool, whose unit is one request slot), window the sliding window
// of a SlidingWindow pool (0 otherwise).
func newPool(name string, kind sdk.PoolKind, page, window int64) *poolBuilder {
	return &poolBuilder{pool: sdk.Pool{Name: name, Kind: kind, PageSize: page, Window: window}}
}

func (b *poolBuilder) add(name string, role sdk.Role, layer int64, dtype string, shape ...int64) {
	buf := sdk.Buffer{Pool: b.pool.Name, Name: name, Role: role, Layer: int32(layer), Shape: shape, DType: dtype}
	if b.err != nil {
		return
	}
	n, err := buf.Bytes()
	switch {
	case err != nil:
		b.err = fmt.Errorf("layout: %w", err)
	case len(b.pool.Buffers) >= sdk.MaxBuffers:
		b.err = fmt.Errorf("layout: pool %s needs more than %d buffers", b.pool.Name, sdk.MaxBuffers)
	case b.pool.BytesPerUnit > maxBytesPerUnit-n:
		b.err = fmt.Errorf("layout: pool %s needs more than %d bytes per %s", b.pool.Name, int64(maxBytesPerUnit), b.pool.Unit())
	default:
		b.pool.Buffers = append(b.pool.Buffers, buf)
		b.pool.BytesPerUnit += n
	}
}

// maxBytesPerUnit bounds a pool's unit so that units × bytes cannot
// overflow int64 for any realistic memory size (1 TiB per token or slot).
const maxBytesPerUnit = 1 << 40

func (b *poolBuilder) done() (sdk.Pool, error) { return b.pool, b.err }

// pageTokens is spec §3's token rule: T = floor(budget/cell), capped, then
// floored to a multiple of page. A budget that holds no page is an error.
func pageTokens(budget, cell, page, tokenCap int64) (int64, error) {
	t := int64(0)
	if budget > 0 {
		t = budget / cell
	}
	if tokenCap > 0 && t > tokenCap {
		t = tokenCap
	}
	t = t / page * page
	if t == 0 {
		return 0, fmt.Errorf("layout: not enough memory: %d bytes at %d bytes per token hold no page of %d tokens (token cap %d)",
			budget, cell, page, tokenCap)
	}
	return t, nil
}

// kvStorage returns the element size and storage dtype for a KV dtype,
// refusing the ones a configurator does not handle.
func kvStorage(kind, kvDType string, allowed ...string) (int64, string, error) {
	ok := false
	for _, a := range allowed {
		ok = ok || a == kvDType
	}
	if !ok {
		return 0, "", fmt.Errorf("layout: %s configurator: kv_dtype %q not supported, want one of %v", kind, kvDType, allowed)
	}
	e, _ := sdk.KVElementSize(kvDType)
	st, _ := sdk.KVStorageDType(kvDType)
	return e, st, nil
}

// pyFloorDiv is CPython's float floor division (float_floor_div in
// Objects/floatobject.c), which SGLang's Mamba sizing uses; math.Floor(a/b)
// can differ from it by one near integers.
func pyFloorDiv(vx, wx float64) float64 {
	mod := math.Mod(vx, wx)
	div := (vx - mod) / wx
	if mod != 0 && (wx < 0) != (mod < 0) {
		div -= 1.0
	}
	if div == 0 {
		return math.Copysign(0, vx/wx)
	}
	f := math.Floor(div)
	if div-f > 0.5 {
		f += 1.0
	}
	return f
}
