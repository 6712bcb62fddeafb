package plugin

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"

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
		[]api.ValueType{i32, i32, i32, i64}, []api.ValueType{i32}).Export(sdk.ImportDeclarePool)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(declareBuffer),
		[]api.ValueType{i32, i32, i32, i32, i32, i32, i32, i32, i32}, []api.ValueType{i32}).Export(sdk.ImportDeclareBuffer)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(setUnits),
		[]api.ValueType{i32, i32, i64}, []api.ValueType{i32}).Export(sdk.ImportSetUnits)
	b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
		hostLog(ctx, mod, stack, log)
	}), []api.ValueType{i32, i32, i32}, nil).Export(sdk.ImportLog)
	_, err := b.Instantiate(ctx)
	return err
}

func status(stack []uint64, s int32) { stack[0] = api.EncodeI32(s) }

// declarePool: (name_ptr, name_len, unit i32, bytes_per_unit i64) -> i32.
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
	name, ok := readString(mod, api.DecodeU32(stack[0]), api.DecodeU32(stack[1]))
	if !ok {
		status(stack, st.fail(sdk.StatusBadPointer, "declare_pool: name (ptr %d, len %d) is outside guest memory or too long", api.DecodeU32(stack[0]), api.DecodeU32(stack[1])))
		return
	}
	unit, bytes := sdk.Unit(api.DecodeI32(stack[2])), int64(stack[3])
	switch {
	case sdk.CheckName("pool name", name) != nil:
		status(stack, st.fail(sdk.StatusBadArgument, "declare_pool: %v", sdk.CheckName("pool name", name)))
	case !unit.Valid():
		status(stack, st.fail(sdk.StatusBadArgument, "declare_pool %s: unit %d, want 0 (token) or 1 (request)", name, int32(unit)))
	case bytes < 1:
		status(stack, st.fail(sdk.StatusBadArgument, "declare_pool %s: bytes_per_unit %d, want >= 1", name, bytes))
	case st.pool(name) != nil:
		status(stack, st.fail(sdk.StatusDuplicate, "declare_pool %s: declared twice", name))
	case len(st.pools) >= sdk.MaxPools:
		status(stack, st.fail(sdk.StatusLimit, "declare_pool %s: more than %d pools", name, sdk.MaxPools))
	default:
		st.pools = append(st.pools, sdk.Pool{Name: name, Unit: unit, BytesPerUnit: bytes})
		status(stack, sdk.StatusOK)
	}
}

// declareBuffer: (pool_ptr, pool_len, name_ptr, name_len, layer, shape_ptr,
// shape_len, dtype_ptr, dtype_len i32) -> i32.
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
	dtype, ok3 := readString(mod, u(7), u(8))
	layer := api.DecodeI32(stack[4])
	dims := u(6)
	if !ok1 || !ok2 || !ok3 {
		status(stack, st.fail(sdk.StatusBadPointer, "declare_buffer: a string argument is outside guest memory or too long"))
		return
	}
	if dims == 0 || dims > sdk.MaxShapeDims {
		status(stack, st.fail(sdk.StatusBadArgument, "declare_buffer %s/%s: %d dims, want 1..%d", pool, name, dims, sdk.MaxShapeDims))
		return
	}
	raw, ok := mod.Memory().Read(u(5), dims*8)
	if !ok {
		status(stack, st.fail(sdk.StatusBadPointer, "declare_buffer %s/%s: shape (ptr %d, %d dims) is outside guest memory", pool, name, u(5), dims))
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
	buf := sdk.Buffer{Pool: pool, Name: name, Layer: layer, Shape: shape, DType: dtype}
	if err := sdk.CheckName("buffer name", name); err != nil {
		status(stack, st.fail(sdk.StatusBadArgument, "declare_buffer: %v", err))
		return
	}
	if _, err := buf.Bytes(); err != nil {
		status(stack, st.fail(sdk.StatusBadArgument, "declare_buffer: %v", err))
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
