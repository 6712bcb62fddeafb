package guest

import (
	"fmt"

	"github.com/kvhost/kvhost/sdk"
)

// Recorder is a Host that records declarations in memory, for testing a
// Configurator natively. It checks each declaration the way the real host
// does (pool fields, roles per kind, duplicates), but not byte sums (use
// sdk.Pool.Check for that).
type Recorder struct {
	Pools []sdk.Pool
	Units map[string]int64
	Logs  []string
}

var _ Host = (*Recorder)(nil)

func (r *Recorder) pool(name string) *sdk.Pool {
	for i := range r.Pools {
		if r.Pools[i].Name == name {
			return &r.Pools[i]
		}
	}
	return nil
}

// Reset forgets everything recorded.
func (r *Recorder) Reset() { *r = Recorder{} }

func (r *Recorder) DeclarePool(name string, kind sdk.PoolKind, pageSize, window, bytesPerUnit int64) int32 {
	if r.pool(name) != nil {
		return sdk.StatusDuplicate
	}
	p := sdk.Pool{Name: name, Kind: kind, PageSize: pageSize, Window: window, BytesPerUnit: bytesPerUnit}
	if p.CheckHeader() != nil {
		return sdk.StatusBadArgument
	}
	r.Pools = append(r.Pools, p)
	return sdk.StatusOK
}

func (r *Recorder) DeclareBuffer(pool, name string, role sdk.Role, layer int32, shape []int64, dtype string) int32 {
	p := r.pool(pool)
	if p == nil {
		return sdk.StatusUnknownPool
	}
	b := sdk.Buffer{Pool: pool, Name: name, Role: role, Layer: layer, Shape: append([]int64(nil), shape...), DType: dtype}
	if p.CheckBuffer(b) != nil {
		return sdk.StatusBadArgument
	}
	p.Buffers = append(p.Buffers, b)
	return sdk.StatusOK
}

func (r *Recorder) SetUnits(pool string, units int64) int32 {
	if r.pool(pool) == nil {
		return sdk.StatusUnknownPool
	}
	if r.Units == nil {
		r.Units = map[string]int64{}
	}
	if _, dup := r.Units[pool]; dup {
		return sdk.StatusDuplicate
	}
	r.Units[pool] = units
	return sdk.StatusOK
}

func (r *Recorder) Log(level int32, msg string) {
	r.Logs = append(r.Logs, fmt.Sprintf("%d %s", level, msg))
}
