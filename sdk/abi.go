package sdk

import "errors"

// ABIVersion is the version of the configurator ABI described in ABI.md. A
// plugin reports the version it was built against through ExportABIVersion.
//
// Version 2 (this one) declares pools by kind (full attention, sliding
// window, MLA latent, recurrent state) with their page size and window, and
// buffers by role; version 1 declared only a unit and bytes, and hosts that
// speak 2 refuse it (ABI.md §Changes).
const ABIVersion = 2

// Plugin kinds, as reported in Descriptor.Kind.
const (
	KindConfigurator = "configurator"
	// KindSampler is a sampling policy: sampler ABI 1 (SAMPLER_ABI.md,
	// package sdk/sampler), which shares the handshake exports below.
	KindSampler = "sampler"
)

// Exports of the handshake, common to every plugin kind (ExportMalloc,
// ExportFree and ExportLastError are the configurator's: a sampler
// allocates its I/O region once, see SAMPLER_ABI.md).
const (
	// ExportInitialize is the reactor entry point (-buildmode=c-shared). The
	// host runs it once per instance before any other export.
	ExportInitialize = "_initialize"
	// ExportABIVersion: () -> i32.
	ExportABIVersion = "kvhost_abi_version"
	// ExportDescribe: () -> i64, (ptr<<32)|len of the JSON Descriptor.
	ExportDescribe = "kvhost_describe"
	// ExportMalloc: (size i32) -> i32 pointer, 0 on failure.
	ExportMalloc = "kvhost_malloc"
	// ExportFree: (ptr i32) -> ().
	ExportFree = "kvhost_free"
	// ExportLastError: () -> i64, (ptr<<32)|len of the last error text.
	ExportLastError = "kvhost_last_error"
)

// Configurator exports.
const (
	// ExportConfigure: (in_ptr i32, in_len i32) -> i32 status.
	ExportConfigure = "kvhost_configure"
	// ExportSize: (available_bytes i64, token_cap i64, request_cap i64) -> i32 status.
	ExportSize = "kvhost_size"
)

// Host imports, all in module ImportModule.
const (
	ImportModule = "kvhost"
	// ImportDeclarePool: (name_ptr, name_len, kind_ptr, kind_len i32,
	// page_size i64, window i64, bytes_per_unit i64) -> i32.
	ImportDeclarePool = "declare_pool"
	// ImportDeclareBuffer: (pool_ptr, pool_len, name_ptr, name_len,
	// role_ptr, role_len, layer, shape_ptr, shape_len, dtype_ptr,
	// dtype_len i32) -> i32; the shape is shape_len little-endian i64
	// dimensions.
	ImportDeclareBuffer = "declare_buffer"
	// ImportSetUnits: (pool_ptr, pool_len i32, units i64) -> i32.
	ImportSetUnits = "set_units"
	// ImportLog: (level, ptr, len i32) -> ().
	ImportLog = "log"
)

// Status codes returned by the host imports (and by kvhost_configure /
// kvhost_size, where any negative value is an error whose text the host reads
// through ExportLastError).
const (
	StatusOK = 0
	// StatusBadPointer: a (ptr, len) pair lies outside guest memory.
	StatusBadPointer = -1
	// StatusBadArgument: a name, kind, page size, window, role, shape or
	// dtype is invalid.
	StatusBadArgument = -2
	// StatusUnknownPool: the pool was never declared in this configure call.
	StatusUnknownPool = -3
	// StatusDuplicate: the pool or buffer was already declared / set.
	StatusDuplicate = -4
	// StatusWrongPhase: declare_* outside configure, or set_units outside size.
	StatusWrongPhase = -5
	// StatusLimit: too many pools, buffers or log bytes in one call.
	StatusLimit = -6
	// StatusGuestError is what the Go guest library returns from configure or
	// size when the plugin's own code reported an error.
	StatusGuestError = -100
	// StatusDeclined is kvhost_configure's answer when the configurator
	// claims the model's architecture but not this model (its config says
	// another claimant serves it: a Mistral without a sliding window is the
	// mha plugin's, one with a window the swa plugin's); the host asks the
	// next claimant. The Go guest library returns it for an error wrapping
	// ErrDeclined.
	StatusDeclined = -101
)

// ErrDeclined marks a configurator's refusal of a model it claims the
// architecture of but does not serve (StatusDeclined); the text around it
// says which configurator does.
var ErrDeclined = errors.New("declined")

// Log levels for ImportLog.
const (
	LogDebug = 0
	LogInfo  = 1
	LogWarn  = 2
	LogError = 3
)

// Limits the host enforces per configure call (ABI.md §Limits).
const (
	MaxPools      = 16
	MaxBuffers    = 8192
	MaxNameBytes  = 128
	MaxShapeDims  = 8
	MaxInputBytes = 4 << 20
	// MaxPageSize bounds a token pool's page size in tokens.
	MaxPageSize = 1 << 20
)

// PackPtrLen packs a guest (ptr, len) pair into the i64 that describe and
// last_error return.
func PackPtrLen(ptr, n uint32) uint64 { return uint64(ptr)<<32 | uint64(n) }

// UnpackPtrLen is the inverse of PackPtrLen.
func UnpackPtrLen(v uint64) (ptr, n uint32) { return uint32(v >> 32), uint32(v) }
