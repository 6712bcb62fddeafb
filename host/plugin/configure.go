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
	// Recalled: the pools are this version's recorded answer to this
	// exact input (answers.go), checked again, not a new call.
	Recalled bool

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
		return nil, fmt.Errorf("plugin: %s: configure: %w", p.name, err)
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("plugin: %s: configure input: %w", p.name, err)
	}
	if len(raw) > sdk.MaxInputBytes {
		return nil, fmt.Errorf("plugin: %s: configure input is %d bytes, limit %d", p.name, len(raw), sdk.MaxInputBytes)
	}
	if err := p.isClosed(); err != nil {
		return nil, err
	}
	key := answerKey(p.sha, sdk.ExportConfigure, raw)
	var recalled []sdk.Pool
	if p.disk.recall(key, &recalled) && p.checkPools(recalled) == nil {
		return &Layout{Plugin: p.name, Input: in, Pools: recalled, Recalled: true, p: p, input: string(raw)}, nil
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
	p.disk.record(key, pools)
	return &Layout{Plugin: p.name, Input: in, Pools: pools, p: p, input: string(raw)}, nil
}

// checkPools is what a configure answer must pass, whether the guest just
// gave it or it is recalled: at least one pool, each one well formed.
func (p *Plugin) checkPools(pools []sdk.Pool) error {
	if len(pools) == 0 {
		return &ContractError{Plugin: p.name, Call: "configure", Detail: "declared no pools"}
	}
	for _, pool := range pools {
		if err := pool.Check(); err != nil {
			return &ContractError{Plugin: p.name, Call: "configure", Detail: strings.TrimPrefix(err.Error(), "sdk: ")}
		}
	}
	return nil
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
		return nil, &ContractError{Plugin: p.name, Call: sdk.ExportMalloc,
			Detail: fmt.Sprintf("returned block %d cannot hold %d bytes", ptr, len(input))}
	}
	st := &callState{plugin: p.name, phase: phaseConfigure}
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
		return nil, &ContractError{Plugin: p.name, Call: "configure", Detail: st.err.Error()}
	}
	if s := api.DecodeI32(res[0]); s != sdk.StatusOK {
		return nil, &GuestError{Plugin: p.name, Call: "configure", Status: s, Msg: p.lastError(ctx, inst)}
	}
	if err := p.checkPools(st.pools); err != nil {
		return nil, err
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
		return nil, fmt.Errorf("plugin: %s: size(%d, %d, %d): arguments must be >= 0", p.name, available, tokenCap, requestCap)
	}
	if err := p.isClosed(); err != nil {
		return nil, err
	}
	key := answerKey(p.sha, sdk.ExportSize, fmt.Appendf(nil, "%s\x00%d %d %d", l.input, available, tokenCap, requestCap))
	var recalled map[string]int64
	if p.disk.recall(key, &recalled) && l.checkUnits(recalled, available, tokenCap, requestCap) == nil {
		return recalled, nil
	}
	inst, err := p.acquire(ctx)
	if err != nil {
		return nil, err
	}
	units, err := l.size(ctx, inst, available, tokenCap, requestCap)
	p.release(inst, err)
	if err == nil {
		p.disk.record(key, units)
	}
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
			return nil, &ContractError{Plugin: p.name, Call: "configure",
				Detail: "declared different pools for the same input (configure must be a pure function)"}
		}
	}
	st := &callState{plugin: p.name, phase: phaseSize, pools: l.Pools, units: map[string]int64{}}
	res, err := p.call(ctx, inst, sdk.ExportSize, st,
		api.EncodeI64(available), api.EncodeI64(tokenCap), api.EncodeI64(requestCap))
	if err != nil {
		return nil, err
	}
	if st.err != nil {
		return nil, l.sizeError(available, tokenCap, requestCap, "%v", st.err)
	}
	if s := api.DecodeI32(res[0]); s != sdk.StatusOK {
		return nil, &GuestError{Plugin: p.name, Call: "size", Status: s, Msg: p.lastError(ctx, inst)}
	}
	if err := l.checkUnits(st.units, available, tokenCap, requestCap); err != nil {
		return nil, err
	}
	return st.units, nil
}

func (l *Layout) sizeError(available, tokenCap, requestCap int64, format string, args ...any) error {
	return &ContractError{Plugin: l.p.name, Call: fmt.Sprintf("size(%d, %d, %d)", available, tokenCap, requestCap),
		Detail: fmt.Sprintf(format, args...)}
}

// checkUnits is what a size answer must pass, whether the guest just gave
// it or it is recalled: every declared pool and no other gets ≥ 1 unit,
// within its cap, in whole pages, and Σ units × bytes_per_unit ≤
// available.
func (l *Layout) checkUnits(units map[string]int64, available, tokenCap, requestCap int64) error {
	refuse := func(format string, args ...any) error {
		return l.sizeError(available, tokenCap, requestCap, format, args...)
	}
	var total uint64
	var terms []string
	for _, pool := range l.Pools {
		n, ok := units[pool.Name]
		if !ok {
			return refuse("pool %s got no units", pool.Name)
		}
		if n < 1 {
			return refuse("pool %s got %d units, want >= 1", pool.Name, n)
		}
		limit := tokenCap
		if pool.Unit() == sdk.UnitRequest {
			limit = requestCap
		}
		if limit > 0 && n > limit {
			return refuse("pool %s got %d %ss, over the cap of %d", pool.Name, n, pool.Unit(), limit)
		}
		if n%pool.PageSize != 0 {
			return refuse("pool %s got %d tokens, not a whole number of %d-token pages", pool.Name, n, pool.PageSize)
		}
		hi, lo := bits.Mul64(uint64(n), uint64(pool.BytesPerUnit))
		if hi != 0 || lo > math.MaxInt64 || total+lo > math.MaxInt64 {
			return refuse("pool %s: %d units × %d bytes overflows", pool.Name, n, pool.BytesPerUnit)
		}
		total += lo
		terms = append(terms, fmt.Sprintf("%s %d × %d B", pool.Name, n, pool.BytesPerUnit))
	}
	if len(units) != len(l.Pools) {
		return refuse("%d pools got units, %d were declared", len(units), len(l.Pools))
	}
	if int64(total) > available {
		sort.Strings(terms)
		return refuse("units need %d bytes (%s) but only %d are available", total, strings.Join(terms, " + "), available)
	}
	return nil
}
