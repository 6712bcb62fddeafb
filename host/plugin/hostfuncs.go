package plugin

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"

	"github.com/kvhost/kvhost/sdk"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

type phase int

const (
	phaseNone phase = iota
	phaseConfigure
	phaseSize
)

// maxLogBytes bounds what one call may log.
const maxLogBytes = 64 << 10

// callState is the per-call state the host functions fill. It travels in
// the call's context, so one host module serves every instance and caller.
type callState struct {
	plugin   string
	phase    phase
	pools    []sdk.Pool
	units    map[string]int64
	logBytes int
	// err is the first protocol violation; the call fails with it even if
	// the guest ignores the status it got back.
	err error
}

type stateKey struct{}

func withState(ctx context.Context, st *callState) context.Context {
	return context.WithValue(ctx, stateKey{}, st)
}

func stateOf(ctx context.Context) *callState {
	st, _ := ctx.Value(stateKey{}).(*callState)
	return st
}

func (st *callState) fail(status int32, format string, args ...any) int32 {
	if st.err == nil {
		st.err = fmt.Errorf(format, args...)
	}
	return status
}

func (st *callState) pool(name string) *sdk.Pool {
	for i := range st.pools {
		if st.pools[i].Name == name {
			return &st.pools[i]
		}
	}
	return nil
}

func (st *callState) buffers() int {
	n := 0
	for _, p := range st.pools {
		n += len(p.Buffers)
	}
	return n
}

// readString copies a (ptr, len) string out of guest memory.
func readString(mod api.Module, ptr, n uint32) (string, bool) {
	if n > sdk.MaxNameBytes {
		return "", false
	}
	b, ok := mod.Memory().Read(ptr, n)
	if !ok {
		return "", false
	}
	return string(b), true
}

func instantiateHostModule(ctx context.Context, rt wazero.Runtime, log *slog.Logger) error {
	i32, i64 := api.ValueTypeI32, api.ValueTypeI64
	b := rt.NewHostModuleBuilder(sdk.ImportModule)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(declarePool),
		[]api.ValueType{i32, i32, i32, i32, i64, i64, i64}, []api.ValueType{i32}).Export(sdk.ImportDeclarePool)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(declareBuffer),
		[]api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}).Export(sdk.ImportDeclareBuffer)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(setUnits),
		[]api.ValueType{i32, i32, i64}, []api.ValueType{i32}).Export(sdk.ImportSetUnits)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		hostLog(ctx, mod, stack, log)
	}), []api.ValueType{i32, i32, i32}, nil).Export(sdk.ImportLog)
	_, err := b.Instantiate(ctx)
	return err
}

func status(stack []uint64, s int32) { stack[0] = api.EncodeI32(s) }

// declarePool: (name_ptr, name_len, kind_ptr, kind_len i32, page_size i64,
// window i64, bytes_per_unit i64) -> i32.
func declarePool(ctx context.Context, mod api.Module, stack []uint64) {
	st := stateOf(ctx)
	if st == nil || st.phase != phaseConfigure {
		if st != nil {
			status(stack, st.fail(sdk.StatusWrongPhase, "declare_pool outside configure"))
		} else {
			status(stack, sdk.StatusWrongPhase)
		}
		return
	}
	u := func(i int) uint32 { return api.DecodeU32(stack[i]) }
	name, ok1 := readString(mod, u(0), u(1))
	kind, ok2 := readString(mod, u(2), u(3))
	if !ok1 || !ok2 {
		status(stack, st.fail(sdk.StatusBadPointer, "declare_pool: a string argument is outside guest memory or too long"))
		return
	}
	p := sdk.Pool{Name: name, Kind: sdk.PoolKind(kind), PageSize: int64(stack[4]), Window: int64(stack[5]), BytesPerUnit: int64(stack[6])}
	switch err := p.CheckHeader(); {
	case err != nil:
		status(stack, st.fail(sdk.StatusBadArgument, "declare_pool: %s", strings.TrimPrefix(err.Error(), "sdk: ")))
	case st.pool(name) != nil:
		status(stack, st.fail(sdk.StatusDuplicate, "declare_pool %s: declared twice", name))
	case len(st.pools) >= sdk.MaxPools:
		status(stack, st.fail(sdk.StatusLimit, "declare_pool %s: more than %d pools", name, sdk.MaxPools))
	default:
		st.pools = append(st.pools, p)
		status(stack, sdk.StatusOK)
	}
}

// declareBuffer: (pool_ptr, pool_len, name_ptr, name_len, role_ptr,
// role_len, layer, shape_ptr, shape_len, dtype_ptr, dtype_len i32) -> i32.
func declareBuffer(ctx context.Context, mod api.Module, stack []uint64) {
	st := stateOf(ctx)
	if st == nil || st.phase != phaseConfigure {
		if st != nil {
			status(stack, st.fail(sdk.StatusWrongPhase, "declare_buffer outside configure"))
		} else {
			status(stack, sdk.StatusWrongPhase)
		}
		return
	}
	u := func(i int) uint32 { return api.DecodeU32(stack[i]) }
	pool, ok1 := readString(mod, u(0), u(1))
	name, ok2 := readString(mod, u(2), u(3))
	role, ok3 := readString(mod, u(4), u(5))
	dtype, ok4 := readString(mod, u(9), u(10))
	layer := api.DecodeI32(stack[6])
	dims := u(8)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		status(stack, st.fail(sdk.StatusBadPointer, "declare_buffer: a string argument is outside guest memory or too long"))
		return
	}
	if dims == 0 || dims > sdk.MaxShapeDims {
		status(stack, st.fail(sdk.StatusBadArgument, "declare_buffer %s/%s: %d dims, want 1..%d", pool, name, dims, sdk.MaxShapeDims))
		return
	}
	raw, ok := mod.Memory().Read(u(7), dims*8)
	if !ok {
		status(stack, st.fail(sdk.StatusBadPointer, "declare_buffer %s/%s: shape (ptr %d, %d dims) is outside guest memory", pool, name, u(7), dims))
		return
	}
	shape := make([]int64, dims)
	for i := range shape {
		shape[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
	}
	p := st.pool(pool)
	if p == nil {
		status(stack, st.fail(sdk.StatusUnknownPool, "declare_buffer %s/%s: pool %q was not declared", pool, name, pool))
		return
	}
	if st.buffers() >= sdk.MaxBuffers {
		status(stack, st.fail(sdk.StatusLimit, "declare_buffer %s/%s: more than %d buffers", pool, name, sdk.MaxBuffers))
		return
	}
	buf := sdk.Buffer{Pool: pool, Name: name, Role: sdk.Role(role), Layer: layer, Shape: shape, DType: dtype}
	if err := p.CheckBuffer(buf); err != nil {
		status(stack, st.fail(sdk.StatusBadArgument, "declare_buffer: %s", strings.TrimPrefix(err.Error(), "sdk: ")))
		return
	}
	p.Buffers = append(p.Buffers, buf)
	status(stack, sdk.StatusOK)
}

// setUnits: (pool_ptr, pool_len i32, units i64) -> i32.
func setUnits(ctx context.Context, mod api.Module, stack []uint64) {
	st := stateOf(ctx)
	if st == nil || st.phase != phaseSize {
		if st != nil {
			status(stack, st.fail(sdk.StatusWrongPhase, "set_units outside size"))
		} else {
			status(stack, sdk.StatusWrongPhase)
		}
		return
	}
	name, ok := readString(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	if !ok {
		status(stack, st.fail(sdk.StatusBadPointer, "set_units: pool name is outside guest memory or too long"))
		return
	}
	units := int64(stack[2])
	switch _, dup := st.units[name]; {
	case st.pool(name) == nil:
		status(stack, st.fail(sdk.StatusUnknownPool, "set_units %s=%d: pool %q was not declared by configure", name, units, name))
	case dup:
		status(stack, st.fail(sdk.StatusDuplicate, "set_units %s: set twice", name))
	default:
		st.units[name] = units
		status(stack, sdk.StatusOK)
	}
}

// hostLog: (level, ptr, len i32). Messages beyond maxLogBytes per call are
// dropped; a bad pointer is ignored (logging must never fail a call).
func hostLog(ctx context.Context, mod api.Module, stack []uint64, log *slog.Logger) {
	st := stateOf(ctx)
	n := api.DecodeU32(stack[2])
	if st == nil || st.logBytes+int(n) > maxLogBytes {
		return
	}
	b, ok := mod.Memory().Read(api.DecodeU32(stack[1]), n)
	if !ok {
		return
	}
	st.logBytes += int(n)
	level := slog.LevelInfo
	switch api.DecodeI32(stack[0]) {
	case sdk.LogDebug:
		level = slog.LevelDebug
	case sdk.LogWarn:
		level = slog.LevelWarn
	case sdk.LogError:
		level = slog.LevelError
	}
	log.Log(ctx, level, string(b), "plugin", st.plugin)
}
