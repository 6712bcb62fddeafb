package sdk

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"unicode/utf8"
)

// Unit is what one unit of a pool holds: a token's cells or a request's
// state slot. A pool's kind decides it (PoolKind.Unit).
type Unit int32

const (
	UnitToken   Unit = 0
	UnitRequest Unit = 1
)

func (u Unit) String() string {
	switch u {
	case UnitToken:
		return "token"
	case UnitRequest:
		return "request"
	}
	return fmt.Sprintf("unit(%d)", int32(u))
}

// PoolKind is what a pool holds and how the host hands it out (ABI.md
// §Pools).
type PoolKind string

const (
	// FullAttention holds every past token of the layers it serves (K and
	// V rows, and their block scales), in pages of PageSize tokens.
	FullAttention PoolKind = "full"
	// SlidingWindow holds the layers whose attention looks back at most
	// Window tokens; pages that fall out of every window may be released.
	SlidingWindow PoolKind = "window"
	// LatentAttention holds MLA's compressed latent row per token and
	// layer; the values are the first v_head_dim elements of it.
	LatentAttention PoolKind = "latent"
	// RecurrentState holds one slot per running request (Mamba/GDN conv and
	// SSM state), whatever its length.
	RecurrentState PoolKind = "state"
)

// PoolKinds lists every kind, in ABI order.
var PoolKinds = []PoolKind{FullAttention, SlidingWindow, LatentAttention, RecurrentState}

// Valid reports whether k is a defined kind.
func (k PoolKind) Valid() bool { return slices.Contains(PoolKinds, k) }

// Unit is what one unit of a pool of this kind holds: a token for the
// attention kinds, a request slot for RecurrentState.
func (k PoolKind) Unit() Unit {
	if k == RecurrentState {
		return UnitRequest
	}
	return UnitToken
}

// Role is what a buffer holds (ABI.md §Roles). The host realises the
// attention roles as the model's KV cache and checks their bytes against
// the KV encoding; workspace buffers are allocated and accounted, never
// interpreted.
type Role string

const (
	RoleK           Role = "k"            // keys of one layer, a row per token
	RoleV           Role = "v"            // values of one layer
	RoleKScale      Role = "k_scale"      // block scales of the k row (mxfp8, nvfp4)
	RoleVScale      Role = "v_scale"      // block scales of the v row
	RoleLatent      Role = "latent"       // MLA: compressed c_kv and rope key of one layer
	RoleLatentScale Role = "latent_scale" // block scales of the latent row
	RoleConv        Role = "conv"         // Mamba/GDN causal-conv state of one layer
	RoleSSM         Role = "ssm"          // Mamba/GDN recurrent (temporal) state of one layer
	// RoleWorkspace is memory the plugin reserves per unit that no layer
	// reads through the pool (e.g. FP4's shared dequant buffer, layer −1).
	RoleWorkspace Role = "workspace"
)

// rolesOf lists the roles each pool kind may hold.
var rolesOf = map[PoolKind][]Role{
	FullAttention:   {RoleK, RoleV, RoleKScale, RoleVScale, RoleWorkspace},
	SlidingWindow:   {RoleK, RoleV, RoleKScale, RoleVScale, RoleWorkspace},
	LatentAttention: {RoleLatent, RoleLatentScale, RoleWorkspace},
	RecurrentState:  {RoleConv, RoleSSM, RoleWorkspace},
}

// Roles returns the roles a pool of kind k may hold.
func (k PoolKind) Roles() []Role { return slices.Clone(rolesOf[k]) }

// Descriptor is what kvhost_describe returns (ABI.md §Descriptor).
type Descriptor struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
	ABI     int    `json:"abi"`
	// Architectures lists the HF "architectures" values the plugin claims.
	Architectures []string `json:"architectures"`
	// KVDTypes optionally lists the KV dtypes a configurator accepts, first
	// preferred; empty means every sdk.KVDTypes entry except fp4 and mxfp8.
	KVDTypes []string `json:"kv_dtypes,omitempty"`
}

// Validate checks the descriptor's fields and names the first bad one.
func (d Descriptor) Validate() error {
	if err := checkName("name", d.Name); err != nil {
		return err
	}
	if d.Version == "" || len(d.Version) > MaxNameBytes {
		return fmt.Errorf("sdk: descriptor version %q: want 1..%d bytes", d.Version, MaxNameBytes)
	}
	if d.Kind != KindConfigurator && d.Kind != KindSampler {
		return fmt.Errorf("sdk: descriptor kind %q: want %q or %q", d.Kind, KindConfigurator, KindSampler)
	}
	if d.ABI != ABIVersion {
		return fmt.Errorf("sdk: descriptor abi %d: want %d", d.ABI, ABIVersion)
	}
	for _, a := range d.Architectures {
		if err := checkName("architecture", a); err != nil {
			return err
		}
	}
	for _, k := range d.KVDTypes {
		if !slices.Contains(KVDTypes, CanonicalKVDType(k)) {
			return fmt.Errorf("sdk: descriptor kv_dtypes: %q is not one of %v", k, KVDTypes)
		}
	}
	return nil
}

// Claims reports whether the descriptor lists the architecture.
func (d Descriptor) Claims(arch string) bool { return slices.Contains(d.Architectures, arch) }

// ParseDescriptor decodes and validates a descriptor.
func ParseDescriptor(b []byte) (Descriptor, error) {
	var d Descriptor
	if err := strictUnmarshal(b, &d); err != nil {
		return Descriptor{}, fmt.Errorf("sdk: descriptor: %w", err)
	}
	if err := d.Validate(); err != nil {
		return Descriptor{}, err
	}
	return d, nil
}

// HostFacts are the host's side of a configure call (ABI.md §Host facts).
type HostFacts struct {
	KVDType       string `json:"kv_dtype"`
	PageSize      int64  `json:"page_size"`
	TPSize        int64  `json:"tp_size"`
	ContextLength int64  `json:"context_length"`
	// DraftLayers is the number of EAGLE/MTP draft layers whose KV shares the
	// pool (0 without speculative decoding).
	DraftLayers int64 `json:"draft_layers"`
	// SWAFullTokensRatio is SGLang's swa_full_tokens_ratio: a hybrid
	// sliding-window model's window pool holds this share of the full
	// pool's tokens (spec §3 "Hybrid SWA"); 0 means the default 0.8.
	SWAFullTokensRatio float64 `json:"swa_full_tokens_ratio,omitempty"`
	// MambaFullMemoryRatio is SGLang's mamba_full_memory_ratio m: without a
	// request cap a hybrid Mamba model's state takes rest·m/(1+m) of the KV
	// budget (spec §3 "Mamba state"); 0 means the default 0.9.
	MambaFullMemoryRatio float64 `json:"mamba_full_memory_ratio,omitempty"`
	// MaxRunningRequests and ChunkedPrefill are the scheduler's limits: at
	// most that many requests run at once, and one forward adds at most
	// that many tokens to a sequence (0: not given). A configurator may
	// size window or state pools from them instead of a memory ratio.
	MaxRunningRequests int64 `json:"max_running_requests"`
	ChunkedPrefill     int64 `json:"chunked_prefill_size"`
	// SGLangCompat asks for SGLang's sizing where a configurator's own
	// differs (the host's --sglang-compat): a hybrid sliding-window
	// model's window pool then takes swa_full_tokens_ratio of the full
	// pool's tokens instead of what MaxRunningRequests sequences can hold.
	SGLangCompat bool `json:"sglang_compat,omitempty"`
}

// WindowPages is the most pages one sequence holds of a sliding-window
// pool of window tokens in pages of page tokens when one forward adds at
// most chunk tokens to it: the pages covering the window − 1 tokens before
// the chunk and the chunk itself, at any alignment (the host releases the
// pages that fall out of the window). The host's pools and the
// configurators' sizing share this figure.
func WindowPages(window, chunk, page int64) int64 { return (window-1+chunk)/page + 2 }

// Defaults of the sizing ratios a host may leave at 0 (spec §3).
const (
	DefaultSWAFullTokensRatio   = 0.8
	DefaultMambaFullMemoryRatio = 0.9
	// MaxMambaFullMemoryRatio bounds mamba_full_memory_ratio; at 100 the
	// state already takes 99% of the budget.
	MaxMambaFullMemoryRatio = 100
)

// WithDefaults returns a copy with zero fields filled (bf16, page 1, TP 1,
// context 8192, the default sizing ratios) and the KV dtype in its
// canonical spelling (fp4 → nvfp4).
func (h HostFacts) WithDefaults() HostFacts {
	if h.KVDType == "" {
		h.KVDType = KVBF16
	}
	h.KVDType = CanonicalKVDType(h.KVDType)
	if h.PageSize == 0 {
		h.PageSize = 1
	}
	if h.TPSize == 0 {
		h.TPSize = 1
	}
	if h.ContextLength == 0 {
		h.ContextLength = 8192
	}
	if h.SWAFullTokensRatio == 0 {
		h.SWAFullTokensRatio = DefaultSWAFullTokensRatio
	}
	if h.MambaFullMemoryRatio == 0 {
		h.MambaFullMemoryRatio = DefaultMambaFullMemoryRatio
	}
	return h
}

// Validate names the first field out of range.
func (h HostFacts) Validate() error {
	if !slices.Contains(KVDTypes, h.KVDType) {
		return fmt.Errorf("sdk: host kv_dtype %q: want one of %v", h.KVDType, KVDTypes)
	}
	if h.PageSize < 1 || h.PageSize > 1<<20 {
		return fmt.Errorf("sdk: host page_size %d: want 1..%d", h.PageSize, 1<<20)
	}
	if h.TPSize < 1 || h.TPSize > 1024 {
		return fmt.Errorf("sdk: host tp_size %d: want 1..1024", h.TPSize)
	}
	if h.ContextLength < 1 || h.ContextLength > 1<<30 {
		return fmt.Errorf("sdk: host context_length %d: want 1..%d", h.ContextLength, 1<<30)
	}
	if h.DraftLayers < 0 || h.DraftLayers > 64 {
		return fmt.Errorf("sdk: host draft_layers %d: want 0..64", h.DraftLayers)
	}
	if !(h.SWAFullTokensRatio > 0 && h.SWAFullTokensRatio <= 1) {
		return fmt.Errorf("sdk: host swa_full_tokens_ratio %v: want (0, 1]", h.SWAFullTokensRatio)
	}
	if !(h.MambaFullMemoryRatio > 0 && h.MambaFullMemoryRatio <= MaxMambaFullMemoryRatio) {
		return fmt.Errorf("sdk: host mamba_full_memory_ratio %v: want (0, %d]", h.MambaFullMemoryRatio, MaxMambaFullMemoryRatio)
	}
	if h.MaxRunningRequests < 0 || h.MaxRunningRequests > 1<<20 {
		return fmt.Errorf("sdk: host max_running_requests %d: want 0 (not given)..%d", h.MaxRunningRequests, 1<<20)
	}
	if h.ChunkedPrefill < 0 || h.ChunkedPrefill > 1<<30 {
		return fmt.Errorf("sdk: host chunked_prefill_size %d: want 0 (not given)..%d", h.ChunkedPrefill, 1<<30)
	}
	return nil
}

// ConfigureInput is the JSON a configurator's kvhost_configure receives.
type ConfigureInput struct {
	// Model is the model's HF config.json object, verbatim.
	Model json.RawMessage `json:"model"`
	Host  HostFacts       `json:"host"`
}

// ParseConfigureInput decodes an input, fills host defaults and validates.
func ParseConfigureInput(b []byte) (ConfigureInput, error) {
	if len(b) > MaxInputBytes {
		return ConfigureInput{}, fmt.Errorf("sdk: configure input is %d bytes, limit %d", len(b), MaxInputBytes)
	}
	var in ConfigureInput
	if err := strictUnmarshal(b, &in); err != nil {
		return ConfigureInput{}, fmt.Errorf("sdk: configure input: %w", err)
	}
	m := bytes.TrimSpace(in.Model)
	if len(m) == 0 || m[0] != '{' {
		return ConfigureInput{}, errors.New("sdk: configure input: model must be a JSON object")
	}
	in.Host = in.Host.WithDefaults()
	if err := in.Host.Validate(); err != nil {
		return ConfigureInput{}, err
	}
	return in, nil
}

// Buffer is one declared buffer: Shape is per unit of its pool, so the
// buffer holds prod(Shape)·DTypeSize(DType) bytes per unit. Role says what
// it holds; Layer is the model layer it serves, or -1 for a workspace
// shared by all layers. Name labels it (unique per layer within its pool).
type Buffer struct {
	Pool  string  `json:"pool"`
	Name  string  `json:"name"`
	Role  Role    `json:"role"`
	Layer int32   `json:"layer"`
	Shape []int64 `json:"shape"`
	DType string  `json:"dtype"`
}

// Bytes returns the buffer's bytes per unit, refusing bad dtypes, empty or
// non-positive dimensions and overflow.
func (b Buffer) Bytes() (int64, error) {
	size, ok := DTypeSize(b.DType)
	if !ok {
		return 0, fmt.Errorf("sdk: buffer %s/%s: unknown dtype %q", b.Pool, b.Name, b.DType)
	}
	if len(b.Shape) == 0 || len(b.Shape) > MaxShapeDims {
		return 0, fmt.Errorf("sdk: buffer %s/%s: shape has %d dims, want 1..%d", b.Pool, b.Name, len(b.Shape), MaxShapeDims)
	}
	if b.Layer < -1 {
		return 0, fmt.Errorf("sdk: buffer %s/%s: layer %d, want -1 (shared) or >= 0", b.Pool, b.Name, b.Layer)
	}
	n := uint64(size)
	for _, d := range b.Shape {
		if d < 1 {
			return 0, fmt.Errorf("sdk: buffer %s/%s: dimension %d in shape %v, want >= 1", b.Pool, b.Name, d, b.Shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, fmt.Errorf("sdk: buffer %s/%s: shape %v overflows int64 bytes", b.Pool, b.Name, b.Shape)
		}
		n = lo
	}
	return int64(n), nil
}

// Pool is one declared pool with its buffers. PageSize is the tokens of one
// page (token kinds) and 1 for RecurrentState (a unit is one slot); Window
// is the sliding window in tokens, set for SlidingWindow only.
type Pool struct {
	Name         string   `json:"name"`
	Kind         PoolKind `json:"kind"`
	PageSize     int64    `json:"page_size"`
	Window       int64    `json:"window,omitempty"`
	BytesPerUnit int64    `json:"bytes_per_unit"`
	Buffers      []Buffer `json:"buffers"`
}

// Unit is what one unit of the pool holds (its kind's unit).
func (p Pool) Unit() Unit { return p.Kind.Unit() }

// CheckHeader verifies the pool's own fields (what declare_pool carries):
// name, kind, page size, window and bytes per unit.
func (p Pool) CheckHeader() error {
	if err := checkName("pool name", p.Name); err != nil {
		return err
	}
	if !p.Kind.Valid() {
		return fmt.Errorf("sdk: pool %s: kind %q, want one of %v", p.Name, p.Kind, PoolKinds)
	}
	switch {
	case p.Kind == RecurrentState && p.PageSize != 1:
		return fmt.Errorf("sdk: pool %s: a %s pool's page size is one slot, got %d", p.Name, p.Kind, p.PageSize)
	case p.PageSize < 1 || p.PageSize > MaxPageSize:
		return fmt.Errorf("sdk: pool %s: page_size %d, want 1..%d tokens", p.Name, p.PageSize, MaxPageSize)
	case p.Kind == SlidingWindow && (p.Window < 1 || p.Window > 1<<30):
		return fmt.Errorf("sdk: pool %s: a %s pool needs window 1..%d tokens, got %d", p.Name, p.Kind, 1<<30, p.Window)
	case p.Kind != SlidingWindow && p.Window != 0:
		return fmt.Errorf("sdk: pool %s: window %d on a %s pool (only %s pools have one)", p.Name, p.Window, p.Kind, SlidingWindow)
	case p.BytesPerUnit < 1:
		return fmt.Errorf("sdk: pool %s: bytes_per_unit %d, want >= 1", p.Name, p.BytesPerUnit)
	}
	return nil
}

// CheckBuffer verifies one buffer against the pool's kind: a role the kind
// holds, a layer (-1 only for workspaces) and a valid shape and dtype.
func (p Pool) CheckBuffer(b Buffer) error {
	if b.Pool != p.Name {
		return fmt.Errorf("sdk: pool %s: holds buffer %s of pool %s", p.Name, b.Name, b.Pool)
	}
	if err := checkName("buffer name", b.Name); err != nil {
		return err
	}
	if !slices.Contains(rolesOf[p.Kind], b.Role) {
		return fmt.Errorf("sdk: buffer %s/%s: role %q, a %s pool holds %v", p.Name, b.Name, b.Role, p.Kind, rolesOf[p.Kind])
	}
	if b.Layer == -1 && b.Role != RoleWorkspace {
		return fmt.Errorf("sdk: buffer %s/%s: layer -1 (shared) is for %s buffers, not %s", p.Name, b.Name, RoleWorkspace, b.Role)
	}
	_, err := b.Bytes()
	return err
}

// Check verifies the pool's fields and buffers and that the buffers add up
// exactly to BytesPerUnit, with unique (name, layer) pairs.
func (p Pool) Check() error {
	if err := p.CheckHeader(); err != nil {
		return err
	}
	type key struct {
		name  string
		layer int32
	}
	seen := make(map[key]bool, len(p.Buffers))
	var sum int64
	for _, b := range p.Buffers {
		if err := p.CheckBuffer(b); err != nil {
			return err
		}
		if seen[key{b.Name, b.Layer}] {
			return fmt.Errorf("sdk: pool %s: buffer %s layer %d declared twice", p.Name, b.Name, b.Layer)
		}
		seen[key{b.Name, b.Layer}] = true
		n, _ := b.Bytes()
		if sum > math.MaxInt64-n {
			return fmt.Errorf("sdk: pool %s: buffer bytes overflow int64", p.Name)
		}
		sum += n
	}
	if sum != p.BytesPerUnit {
		return fmt.Errorf("sdk: pool %s: buffers add up to %d bytes per %s but the pool declares %d",
			p.Name, sum, p.Unit(), p.BytesPerUnit)
	}
	return nil
}

// checkName accepts 1..MaxNameBytes bytes of printable UTF-8.
func checkName(what, s string) error {
	if s == "" || len(s) > MaxNameBytes || !utf8.ValidString(s) {
		return fmt.Errorf("sdk: %s %q: want 1..%d bytes of UTF-8", what, s, MaxNameBytes)
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Errorf("sdk: %s %q: control characters are not allowed", what, s)
	}
	return nil
}

// CheckName is checkName for callers outside the package (the host checks
// names arriving through imports with it).
func CheckName(what, s string) error { return checkName(what, s) }

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// defaultKVDTypes is what a configurator accepts when its descriptor lists
// no kv_dtypes.
var defaultKVDTypes = []string{KVBF16, KVFP16, KVFP8E4M3, KVFP8E5M2}

// AcceptedKVDTypes returns the KV dtypes the plugin accepts, preferred
// first, in canonical spelling.
func (d Descriptor) AcceptedKVDTypes() []string {
	if len(d.KVDTypes) == 0 {
		return slices.Clone(defaultKVDTypes)
	}
	out := make([]string, len(d.KVDTypes))
	for i, k := range d.KVDTypes {
		out[i] = CanonicalKVDType(k)
	}
	return out
}

// AcceptsKVDType reports whether the plugin accepts a KV dtype (in any
// spelling CanonicalKVDType knows).
func (d Descriptor) AcceptsKVDType(kv string) bool {
	return slices.Contains(d.AcceptedKVDTypes(), CanonicalKVDType(kv))
}
