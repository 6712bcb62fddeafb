package sdk

// KV dtypes a host may pass in HostFacts.KVDType (ABI.md §Host facts).
const (
	// KVFP32 is full precision, what the CPU device stores.
	KVFP32    = "fp32"
	KVBF16    = "bf16"
	KVFP16    = "fp16"
	KVFP8E4M3 = "fp8_e4m3"
	KVFP8E5M2 = "fp8_e5m2"
	// KVMXFP8 is FP8 values plus one e8m0 scale byte per 32 elements (spec §3).
	KVMXFP8 = "mxfp8"
	// KVNVFP4 is packed e2m1 pairs plus one FP8 (e4m3) scale per 16
	// elements (spec §3 "FP4 MHA (nvfp4/fp4_mx_block16)").
	KVNVFP4 = "nvfp4"
	// KVFP4 is ABI 1's spelling of KVNVFP4, still accepted as an alias.
	KVFP4 = "fp4"
)

// KVDTypes lists every accepted HostFacts.KVDType in canonical spelling.
var KVDTypes = []string{KVFP32, KVBF16, KVFP16, KVFP8E4M3, KVFP8E5M2, KVMXFP8, KVNVFP4}

// kvDTypeAliases maps other spellings to the canonical ones: ABI 1's fp4,
// and the f32/f16 of kvhost's --kv-cache-dtype.
var kvDTypeAliases = map[string]string{KVFP4: KVNVFP4, "f32": KVFP32, "f16": KVFP16}

// CanonicalKVDType returns the canonical spelling of a KV dtype (fp4 →
// nvfp4, f32 → fp32, f16 → fp16); other strings are returned unchanged.
func CanonicalKVDType(s string) string {
	if c, ok := kvDTypeAliases[s]; ok {
		return c
	}
	return s
}

// bufferDTypes maps each dtype a buffer may be declared with to its size in
// bytes. Sub-byte data is declared packed: "fp4x2" is one byte holding two
// e2m1 values, so every size is a whole number of bytes.
var bufferDTypes = map[string]int64{
	"bf16":     2,
	"fp16":     2,
	"fp32":     4,
	"fp8_e4m3": 1,
	"fp8_e5m2": 1,
	"fp8_e8m0": 1,
	"fp4x2":    1,
	"uint8":    1,
	"int32":    4,
	"int64":    8,
}

// DTypeSize returns the byte size of a buffer dtype and whether it is known.
func DTypeSize(dtype string) (int64, bool) {
	n, ok := bufferDTypes[dtype]
	return n, ok
}

// KVElementSize returns the bytes per stored element of a KV dtype as the
// spec's cell formulas use it (§3: bf16/fp16 2, fp8 and mxfp8 1, fp4 one
// storage byte holds two values so the formulas halve it explicitly).
func KVElementSize(kvDType string) (int64, bool) {
	switch CanonicalKVDType(kvDType) {
	case KVFP32:
		return 4, true
	case KVBF16, KVFP16:
		return 2, true
	case KVFP8E4M3, KVFP8E5M2, KVMXFP8, KVNVFP4:
		return 1, true
	}
	return 0, false
}

// KVStorageDType is the buffer dtype that stores values of a KV dtype
// (mxfp8 stores e4m3 values; nvfp4 stores packed pairs).
func KVStorageDType(kvDType string) (string, bool) {
	switch kvDType = CanonicalKVDType(kvDType); kvDType {
	case KVFP32, KVBF16, KVFP16, KVFP8E4M3, KVFP8E5M2:
		return kvDType, true
	case KVMXFP8:
		return KVFP8E4M3, true
	case KVNVFP4:
		return "fp4x2", true
	}
	return "", false
}
