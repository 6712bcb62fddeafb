package kv

import (
	"fmt"
	"math"
	"slices"

	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/sdk"
)

// LayerNeed is what one model layer keeps between forwards; the model
// states it (model.Config.KVNeeds) and the declaration must provide it.
type LayerNeed struct {
	// KVHeads × HeadDim is the layer's K row and KVHeads × VHeadDim its V
	// row; KVHeads 0 means the layer keeps no attention cache.
	KVHeads, HeadDim, VHeadDim int
	// Latent marks MLA: one row of HeadDim elements (KVHeads 1) whose first
	// VHeadDim elements are the values.
	Latent bool
	// Window > 0: the layer attends to at most Window past positions, so a
	// sliding-window pool of at least that window may serve it.
	Window int
	// State marks a recurrent layer with per-request state (conv, ssm).
	State bool
}

func (n LayerNeed) attention() bool { return n.KVHeads > 0 }

// BufferLayout is one declared buffer as the host realises it.
type BufferLayout struct {
	Name      string   `json:"name"`
	Role      sdk.Role `json:"role"`
	Layer     int      `json:"layer"`
	UnitBytes int64    `json:"unit_bytes"` // per token or slot
	// DType is the declared element type (sdk spelling: fp32, bf16, ...).
	DType string `json:"dtype,omitempty"`
}

// PoolLayout is one declared pool, verified.
type PoolLayout struct {
	Name     string       `json:"name"`
	Kind     sdk.PoolKind `json:"kind"`
	PageSize int          `json:"page_size"`
	Window   int          `json:"window,omitempty"`
	// DType is the encoding of the attention layers it holds (empty for
	// a state pool).
	DType string `json:"kv_dtype,omitempty"`
	// UnitBytes is the bytes per token (token kinds) or per request slot:
	// the sum of its buffers.
	UnitBytes int64 `json:"unit_bytes"`
	// Layers counts the model layers it serves.
	Layers  int            `json:"layers"`
	Buffers []BufferLayout `json:"-"`

	dtype device.KVDType
}

// Unit is what one unit of the pool holds.
func (p PoolLayout) Unit() sdk.Unit { return p.Kind.Unit() }

// Tokens reports whether the pool's units are tokens (kept in pages).
func (p PoolLayout) Tokens() bool { return p.Unit() == sdk.UnitToken }

// Layout is a configurator's declaration verified against the model: every
// buffer's bytes checked against the KV encoding of the layer it serves,
// every layer that keeps a cache served by exactly one pool of a kind that
// fits it. It is immutable; pools are in declaration order.
type Layout struct {
	Pools []PoolLayout `json:"pools"`

	// per model layer: the index in Pools of the token pool holding its
	// attention cache and of the state pool holding its state (-1: none),
	// and the layer's need.
	token, state []int
	needs        []LayerNeed
}

// layerBufs gathers one layer's buffers of one pool by role.
type layerBufs map[sdk.Role]sdk.Buffer

// NewLayout verifies decl (what a configurator declared, e.g.
// plugin.Layout.Pools) against the model's layers and returns the layout
// the host will allocate. A declaration that disagrees with the model —
// bytes that do not match the encoding, a layer served twice or not at all,
// a window pool for a layer that attends to everything — is refused with
// an error naming the pool, layer and numbers.
func NewLayout(decl []sdk.Pool, needs []LayerNeed) (*Layout, error) {
	if len(decl) == 0 {
		return nil, fmt.Errorf("kv: the declaration has no pools")
	}
	l := &Layout{token: filled(len(needs), -1), state: filled(len(needs), -1), needs: slices.Clone(needs)}
	for pi, p := range decl {
		if err := p.Check(); err != nil {
			return nil, fmt.Errorf("kv: %w", err)
		}
		if slices.ContainsFunc(decl[:pi], func(q sdk.Pool) bool { return q.Name == p.Name }) {
			return nil, fmt.Errorf("kv: pool %s declared twice", p.Name)
		}
		pl := PoolLayout{Name: p.Name, Kind: p.Kind, PageSize: int(p.PageSize), Window: int(p.Window), UnitBytes: p.BytesPerUnit}
		if p.Kind != sdk.RecurrentState && p.PageSize > 1<<16 {
			return nil, fmt.Errorf("kv: pool %s: page size %d tokens, the host pages at most %d", p.Name, p.PageSize, 1<<16)
		}
		byLayer := map[int]layerBufs{}
		var layers []int
		for _, b := range p.Buffers {
			n, _ := b.Bytes()
			pl.Buffers = append(pl.Buffers, BufferLayout{Name: b.Name, Role: b.Role, Layer: int(b.Layer), UnitBytes: n, DType: b.DType})
			// Copy-on-write copies pages (and forks copy state slots) as
			// 32-bit words; a page of one token is never shared partly.
			if b.Role != sdk.RoleWorkspace && (pl.PageSize > 1 || p.Kind == sdk.RecurrentState) && int64(pl.PageSize)*n%4 != 0 {
				return nil, fmt.Errorf("kv: pool %s buffer %s: a page of %d × %d bytes is not whole 32-bit words (pages and slots are copied as words)", p.Name, b.Name, pl.PageSize, n)
			}
			if int(b.Layer) >= len(needs) {
				return nil, fmt.Errorf("kv: pool %s buffer %s: layer %d, the model has %d layers", p.Name, b.Name, b.Layer, len(needs))
			}
			if b.Role == sdk.RoleWorkspace {
				continue
			}
			lb := byLayer[int(b.Layer)]
			if lb == nil {
				lb = layerBufs{}
				byLayer[int(b.Layer)] = lb
				layers = append(layers, int(b.Layer))
			}
			if _, dup := lb[b.Role]; dup {
				return nil, fmt.Errorf("kv: pool %s layer %d: two %s buffers", p.Name, b.Layer, b.Role)
			}
			lb[b.Role] = b
		}
		slices.Sort(layers)
		pl.Layers = len(layers)
		for i, layer := range layers {
			var err error
			if p.Kind == sdk.RecurrentState {
				err = l.placeState(pi, pl, layer, byLayer[layer])
			} else {
				var d device.KVDType
				d, err = l.placeAttention(pi, pl, layer, byLayer[layer])
				if err == nil && i > 0 && d != pl.dtype {
					err = fmt.Errorf("kv: pool %s: layer %d is %s, layer %d %s; one pool holds one encoding", p.Name, layers[0], pl.dtype, layer, d)
				}
				pl.dtype = d
			}
			if err != nil {
				return nil, err
			}
		}
		if p.Kind != sdk.RecurrentState && len(layers) > 0 {
			pl.DType = pl.dtype.String()
		}
		l.Pools = append(l.Pools, pl)
	}
	for i, n := range needs {
		switch {
		case n.attention() && l.token[i] < 0:
			return nil, fmt.Errorf("kv: layer %d keeps an attention cache but no pool declares it", i)
		case n.State && l.state[i] < 0:
			return nil, fmt.Errorf("kv: layer %d keeps a recurrent state but no state pool declares it", i)
		}
	}
	return l, nil
}

func filled(n, v int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// kvEncoding names the device encoding of an attention layer from the
// dtypes of its value buffer (k or latent) and scale buffer.
func kvEncoding(pool string, layer int, val sdk.Buffer, scale *sdk.Buffer) (device.KVDType, error) {
	scaleDT := ""
	if scale != nil {
		scaleDT = scale.DType
	}
	switch {
	case scaleDT == "" && val.DType == "fp32":
		return device.KVF32, nil
	case scaleDT == "" && val.DType == "fp16":
		return device.KVF16, nil
	case scaleDT == "" && val.DType == "bf16":
		return device.KVBF16, nil
	case scaleDT == "" && val.DType == "fp8_e4m3":
		return device.KVFP8E4M3, nil
	case scaleDT == "" && val.DType == "fp8_e5m2":
		return device.KVFP8E5M2, nil
	case scaleDT == "fp8_e8m0" && val.DType == "fp8_e4m3":
		return device.KVMXFP8, nil
	case scaleDT == "fp8_e4m3" && val.DType == "fp4x2":
		return device.KVNVFP4, nil
	}
	return 0, fmt.Errorf("kv: pool %s layer %d: %s values with %q scales are no KV encoding the host stores (fp32, fp16, bf16, fp8_e4m3, fp8_e5m2; fp8_e4m3 + fp8_e8m0 scales = mxfp8; fp4x2 + fp8_e4m3 scales = nvfp4)",
		pool, layer, val.DType, scaleDT)
}

// placeAttention checks one layer of a token pool against the model's need
// and records the pool as the layer's.
func (l *Layout) placeAttention(pi int, p PoolLayout, layer int, lb layerBufs) (device.KVDType, error) {
	if layer < 0 {
		return 0, fmt.Errorf("kv: pool %s: layer -1 holds only workspace buffers", p.Name)
	}
	n := l.needs[layer]
	switch {
	case !n.attention():
		return 0, fmt.Errorf("kv: pool %s: layer %d keeps no attention cache", p.Name, layer)
	case l.token[layer] >= 0:
		return 0, fmt.Errorf("kv: pool %s: layer %d is already served by pool %s", p.Name, layer, l.Pools[l.token[layer]].Name)
	case p.Kind == sdk.LatentAttention && !n.Latent:
		return 0, fmt.Errorf("kv: pool %s is a %s pool but layer %d is not MLA (%d KV heads × %d)", p.Name, p.Kind, layer, n.KVHeads, n.HeadDim)
	case p.Kind != sdk.LatentAttention && n.Latent:
		return 0, fmt.Errorf("kv: pool %s is a %s pool but layer %d keeps an MLA latent row", p.Name, p.Kind, layer)
	case p.Kind == sdk.SlidingWindow && (n.Window <= 0 || n.Window > p.Window):
		return 0, fmt.Errorf("kv: pool %s keeps a sliding window of %d tokens but layer %d attends to %s", p.Name, p.Window, layer, windowText(n.Window))
	}
	valRole, scaleRole := sdk.RoleK, sdk.RoleKScale
	if n.Latent {
		valRole, scaleRole = sdk.RoleLatent, sdk.RoleLatentScale
	}
	val, ok := lb[valRole]
	if !ok {
		return 0, fmt.Errorf("kv: pool %s layer %d: no %s buffer", p.Name, layer, valRole)
	}
	var scale *sdk.Buffer
	if s, ok := lb[scaleRole]; ok {
		scale = &s
	}
	d, err := kvEncoding(p.Name, layer, val, scale)
	if err != nil {
		return 0, err
	}
	if b := d.ScaleBlock(); b > 0 && (n.HeadDim%b != 0 || n.VHeadDim%b != 0) {
		return 0, fmt.Errorf("kv: pool %s layer %d: %s needs head dims that are multiples of its %d-element block, the layer's are %d/%d", p.Name, layer, d, b, n.HeadDim, n.VHeadDim)
	}
	type need struct {
		role  sdk.Role
		bytes int64
	}
	want := []need{{valRole, d.RowBytes(n.KVHeads * n.HeadDim)}}
	if d.ScaleBlock() > 0 {
		want = append(want, need{scaleRole, d.ScaleBytes(n.KVHeads * n.HeadDim)})
	}
	if !n.Latent {
		want = append(want, need{sdk.RoleV, d.RowBytes(n.KVHeads * n.VHeadDim)})
		if d.ScaleBlock() > 0 {
			want = append(want, need{sdk.RoleVScale, d.ScaleBytes(n.KVHeads * n.VHeadDim)})
		}
	}
	if len(lb) > len(want) {
		for _, r := range []sdk.Role{sdk.RoleK, sdk.RoleV, sdk.RoleKScale, sdk.RoleVScale, sdk.RoleLatent, sdk.RoleLatentScale} {
			if _, ok := lb[r]; ok && !slices.ContainsFunc(want, func(w need) bool { return w.role == r }) {
				return 0, fmt.Errorf("kv: pool %s layer %d: a %s buffer, which a %s layer does not have", p.Name, layer, r, d)
			}
		}
	}
	for _, w := range want {
		role, bytes := w.role, w.bytes
		b, ok := lb[role]
		if !ok {
			return 0, fmt.Errorf("kv: pool %s layer %d: no %s buffer (a %s layer of %d heads × %d/%d needs %d bytes per token in it)", p.Name, layer, role, d, n.KVHeads, n.HeadDim, n.VHeadDim, bytes)
		}
		if got, _ := b.Bytes(); got != bytes {
			return 0, fmt.Errorf("kv: pool %s layer %d: %s buffer %q holds %d bytes per token, the model's %s row of %d heads × %d/%d needs %d",
				p.Name, layer, role, b.Name, got, d, n.KVHeads, n.HeadDim, n.VHeadDim, bytes)
		}
	}
	l.token[layer] = pi
	return d, nil
}

func windowText(w int) string {
	if w <= 0 {
		return "every past position"
	}
	return fmt.Sprintf("a window of %d", w)
}

// placeState checks one layer of a state pool and records it.
func (l *Layout) placeState(pi int, p PoolLayout, layer int, lb layerBufs) error {
	switch {
	case layer < 0:
		return fmt.Errorf("kv: pool %s: layer -1 holds only workspace buffers", p.Name)
	case !l.needs[layer].State:
		return fmt.Errorf("kv: pool %s: layer %d keeps no recurrent state", p.Name, layer)
	case l.state[layer] >= 0:
		return fmt.Errorf("kv: pool %s: layer %d is already served by pool %s", p.Name, layer, l.Pools[l.state[layer]].Name)
	}
	for _, r := range []sdk.Role{sdk.RoleConv, sdk.RoleSSM} {
		if _, ok := lb[r]; !ok {
			return fmt.Errorf("kv: pool %s layer %d: no %s buffer", p.Name, layer, r)
		}
	}
	if _, err := StateDType(lb[sdk.RoleConv].DType); err != nil {
		return fmt.Errorf("kv: pool %s layer %d conv state: %w", p.Name, layer, err)
	}
	if d := lb[sdk.RoleSSM].DType; d != "fp32" {
		return fmt.Errorf("kv: pool %s layer %d: ssm state dtype %q, want fp32", p.Name, layer, d)
	}
	l.state[layer] = pi
	return nil
}

// StateDType is the device type of a declared conv-state dtype: fp32,
// fp16 or bf16 (the state kernels' ConvState types).
func StateDType(d string) (device.DType, error) {
	switch d {
	case "fp32":
		return device.F32, nil
	case "fp16":
		return device.F16, nil
	case "bf16":
		return device.BF16, nil
	}
	return 0, fmt.Errorf("dtype %q: want fp32, fp16 or bf16", d)
}

// Layers is the number of model layers the layout was verified for.
func (l *Layout) Layers() int { return len(l.needs) }

// TokenPool is the index in Pools of the token pool holding layer's
// attention cache, or -1.
func (l *Layout) TokenPool(layer int) int { return l.token[layer] }

// StatePool is the index in Pools of the state pool holding layer's
// recurrent state, or -1.
func (l *Layout) StatePool(layer int) int { return l.state[layer] }

// Need is the model's need of layer.
func (l *Layout) Need(layer int) LayerNeed { return l.needs[layer] }

// Bytes is the memory units (one count per pool, in Pools order) take:
// Σ units × unit bytes, the declared cells.
func (l *Layout) Bytes(units []int) int64 {
	var n int64
	for i, p := range l.Pools {
		n += int64(units[i]) * p.UnitBytes
	}
	return n
}

// Mapped is what units cost when every buffer is its own allocation
// rounded up to gran bytes (the device's page or VMM granule).
func (l *Layout) Mapped(units []int, gran int64) int64 {
	var n int64
	for i, p := range l.Pools {
		for _, b := range p.Buffers {
			n += AlignUp(int64(units[i])*b.UnitBytes, gran)
		}
	}
	return n
}

// Buffers is the number of buffers over all pools.
func (l *Layout) Buffers() int {
	n := 0
	for _, p := range l.Pools {
		n += len(p.Buffers)
	}
	return n
}

// TokenBytes is the bytes per token over all token pools (the spec's cell
// when there is one pool).
func (l *Layout) TokenBytes() int64 {
	var n int64
	for _, p := range l.Pools {
		if p.Tokens() {
			n += p.UnitBytes
		}
	}
	return n
}

// Check verifies units (one count per pool): at least one unit each, token
// pools in whole pages, no overflow.
func (l *Layout) Check(units []int) error {
	if len(units) != len(l.Pools) {
		return fmt.Errorf("kv: %d unit counts for %d pools", len(units), len(l.Pools))
	}
	var total float64
	for i, p := range l.Pools {
		u := units[i]
		switch {
		case u < 1:
			return fmt.Errorf("kv: pool %s of %d %ss: no memory left for it", p.Name, u, p.Unit())
		case p.Tokens() && u%p.PageSize != 0:
			return fmt.Errorf("kv: pool %s of %d tokens is not a whole number of %d-token pages", p.Name, u, p.PageSize)
		}
		total += float64(u) * float64(p.UnitBytes)
	}
	if total > math.MaxInt64/2 {
		return fmt.Errorf("kv: %v bytes of pools overflow", total)
	}
	return nil
}

// AlignUp rounds n up to a multiple of m (m ≤ 1: n).
func AlignUp(n, m int64) int64 {
	if m <= 1 {
		return n
	}
	return (n + m - 1) / m * m
}
