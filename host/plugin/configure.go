package plugin

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"reflect"
	"sort"
	"strings"

	"github.com/kvhost/kvhost/sdk"
	"github.com/tetratelabs/wazero/api"
)

// Layout is a verified configure result: the pools and buffers a
// configurator declared for one input. It is immutable and safe to share;
// Size may be called concurrently.
type Layout struct {
	Plugin string
	Input  sdk.ConfigureInput
	Pools  []sdk.Pool

	p     *Plugin
	input string // the exact JSON sent to the plugin
}

// TokenBytes is the sum of bytes_per_unit over token pools — the spec's
// cell size when there is a single token pool.
func (l *Layout) TokenBytes() int64 { return l.unitBytes(sdk.UnitToken) }

// RequestBytes is the sum of bytes_per_unit over request pools (state per
// request slot).
func (l *Layout) RequestBytes() int64 { return l.unitBytes(sdk.UnitRequest) }

func (l *Layout) unitBytes(u sdk.Unit) int64 {
	var n int64
	for _, p := range l.Pools {
		if p.Unit() == u {
			n += p.BytesPerUnit
		}
	}
	return n
}

// Pool returns the named pool.
func (l *Layout) Pool(name string) (sdk.Pool, bool) {
	for _, p := range l.Pools {
		if p.Name == name {
			return p, true
		}
	}
	return sdk.Pool{}, false
}

// Configure runs the plugin's kvhost_configure on the model config and host
// facts (defaults filled into a copy) and returns the verified layout.
func (p *Plugin) Configure(ctx context.Context, in sdk.ConfigureInput) (*Layout, error) {
	in.Host = in.Host.WithDefaults()
	if err := in.Host.Validate(); err != nil {
		return nil, fmt.Errorf("plugin: %s: configure: %w", p.m.name, err)
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("plugin: %s: configure input: %w", p.m.name, err)
	}
	if len(raw) > sdk.MaxInputBytes {
		return nil, fmt.Errorf("plugin: %s: configure input is %d bytes, limit %d", p.m.name, len(raw), sdk.MaxInputBytes)
	}
	inst, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	pools, err := p.configure(ctx, inst, string(raw))
	p.release(inst, err)
	if err != nil {
		return nil, err
	}
	return &Layout{Plugin: p.m.name, Input: in, Pools: pools, p: p, input: string(raw)}, nil
}

// configure runs kvhost_configure on inst and verifies the declarations.
func (p *Plugin) configure(ctx context.Context, inst *instance, input string) ([]sdk.Pool, error) {
	inst.configured = ""
	res, err := p.call(ctx, inst, sdk.ExportMalloc, nil, api.EncodeI32(int32(len(input))))
	if err != nil {
		return nil, err
	}
	ptr := api.DecodeU32(res[0])
	if ptr == 0 || !inst.mod.Memory().WriteString(ptr, input) {
		return nil, &ContractError{Plugin: p.m.name, Call: sdk.ExportMalloc,
			Detail: fmt.Sprintf("returned block %d cannot hold %d bytes", ptr, len(input))}
	}
	st := &callState{plugin: p.m.name, phase: phaseConfigure}
	res, err = p.call(ctx, inst, sdk.ExportConfigure, st, api.EncodeU32(ptr), api.EncodeI32(int32(len(input))))
	if err != nil {
		return nil, err
	}
	if _, err := p.call(ctx, inst, sdk.ExportFree, nil, api.EncodeU32(ptr)); err != nil {
		return nil, err
	}
	// A protocol violation outranks the guest's status, which may only be
	// the guest's reaction to the host refusing it.
	if st.err != nil {
		return nil, &ContractError{Plugin: p.m.name, Call: "configure", Detail: st.err.Error()}
	}
	if s := api.DecodeI32(res[0]); s != sdk.StatusOK {
		return nil, &GuestError{Plugin: p.m.name, Call: "configure", Status: s, Msg: p.lastError(ctx, inst)}
	}
	if len(st.pools) == 0 {
		return nil, &ContractError{Plugin: p.m.name, Call: "configure", Detail: "declared no pools"}
	}
	for _, pool := range st.pools {
		if err := pool.Check(); err != nil {
			return nil, &ContractError{Plugin: p.m.name, Call: "configure", Detail: strings.TrimPrefix(err.Error(), "sdk: ")}
		}
	}
	inst.configured = input
	return st.pools, nil
}

// Size runs the plugin's kvhost_size for this layout and verifies the
// result: every declared pool gets units ≥ 1, token pools ≤ tokenCap in
// whole pages and request pools ≤ requestCap (a cap of 0 means none), and
// Σ units × bytes_per_unit ≤ available.
func (l *Layout) Size(ctx context.Context, available, tokenCap, requestCap int64) (map[string]int64, error) {
	p := l.p
	if available < 0 || tokenCap < 0 || requestCap < 0 {
		return nil, fmt.Errorf("plugin: %s: size(%d, %d, %d): arguments must be >= 0", p.m.name, available, tokenCap, requestCap)
	}
	inst, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	units, err := l.size(ctx, inst, available, tokenCap, requestCap)
	p.release(inst, err)
	return units, err
}

func (l *Layout) size(ctx context.Context, inst *instance, available, tokenCap, requestCap int64) (map[string]int64, error) {
	p := l.p
	if inst.configured != l.input {
		pools, err := p.configure(ctx, inst, l.input)
		if err != nil {
			return nil, err
		}
		if !reflect.DeepEqual(pools, l.Pools) {
			inst.configured = ""
			return nil, &ContractError{Plugin: p.m.name, Call: "configure",
				Detail: "declared different pools for the same input (configure must be a pure function)"}
		}
	}
	st := &callState{plugin: p.m.name, phase: phaseSize, pools: l.Pools, units: map[string]int64{}}
	res, err := p.call(ctx, inst, sdk.ExportSize, st,
		api.EncodeI64(available), api.EncodeI64(tokenCap), api.EncodeI64(requestCap))
	if err != nil {
		return nil, err
	}
	refuse := func(format string, args ...any) error {
		return &ContractError{Plugin: p.m.name, Call: fmt.Sprintf("size(%d, %d, %d)", available, tokenCap, requestCap),
			Detail: fmt.Sprintf(format, args...)}
	}
	if st.err != nil {
		return nil, refuse("%v", st.err)
	}
	if s := api.DecodeI32(res[0]); s != sdk.StatusOK {
		return nil, &GuestError{Plugin: p.m.name, Call: "size", Status: s, Msg: p.lastError(ctx, inst)}
	}
	var total uint64
	var terms []string
	for _, pool := range l.Pools {
		n, ok := st.units[pool.Name]
		if !ok {
			return nil, refuse("pool %s got no units", pool.Name)
		}
		if n < 1 {
			return nil, refuse("pool %s got %d units, want >= 1", pool.Name, n)
		}
		limit := tokenCap
		if pool.Unit() == sdk.UnitRequest {
			limit = requestCap
		}
		if limit > 0 && n > limit {
			return nil, refuse("pool %s got %d %ss, over the cap of %d", pool.Name, n, pool.Unit(), limit)
		}
		if n%pool.PageSize != 0 {
			return nil, refuse("pool %s got %d tokens, not a whole number of %d-token pages", pool.Name, n, pool.PageSize)
		}
		hi, lo := bits.Mul64(uint64(n), uint64(pool.BytesPerUnit))
		if hi != 0 || lo > math.MaxInt64 || total+lo > math.MaxInt64 {
			return nil, refuse("pool %s: %d units × %d bytes overflows", pool.Name, n, pool.BytesPerUnit)
		}
		total += lo
		terms = append(terms, fmt.Sprintf("%s %d × %d B", pool.Name, n, pool.BytesPerUnit))
	}
	if int64(total) > available {
		sort.Strings(terms)
		return nil, refuse("units need %d bytes (%s) but only %d are available", total, strings.Join(terms, " + "), available)
	}
	return st.units, nil
}
