package budget

// Device memory classes of the §2 heuristic table, in MiB.
const (
	class20G  = 20 * 1024
	class35G  = 35 * 1024
	class60G  = 60 * 1024
	class90G  = 90 * 1024
	class160G = 160 * 1024
)

// ChunkedPrefillSize is the default chunked_prefill_size for a device with
// gpuMemMiB of memory (nvidia-smi memory.total, minimum over visible GPUs);
// gpuMemMiB <= 0 means unknown (§2 table).
func ChunkedPrefillSize(gpuMemMiB float64) int {
	switch {
	case !(gpuMemMiB > 0):
		return 4096
	case gpuMemMiB < class20G:
		return 2048
	case gpuMemMiB < class60G:
		return 4096
	case gpuMemMiB < class160G:
		return 8192
	default:
		return 16384
	}
}

// GraphMaxBatch is the default decode CUDA graph max batch size for a device
// with gpuMemMiB of memory (<= 0 unknown) at tensor parallel size tp (§2
// table: tp<4 / tp≥4 columns).
func GraphMaxBatch(gpuMemMiB float64, tp int) int {
	big := tp >= 4
	pick := func(small, large int) int {
		if big {
			return large
		}
		return small
	}
	switch {
	case !(gpuMemMiB > 0):
		return 160
	case gpuMemMiB < class20G:
		return 8
	case gpuMemMiB < class35G:
		return pick(48, 160)
	case gpuMemMiB < class60G:
		return pick(32, 160)
	case gpuMemMiB < class160G:
		return pick(256, 512)
	default:
		return 512
	}
}

// DecodeCaptureBatches is the decode CUDA graph capture list for max batch
// maxBS without speculative decoding, padding on (§2): {1,2,4,8,12} ∪
// {16..256 step 8} ∪ {272..496 step 16} ∪ {512.. step 32}, cut at maxBS,
// plus maxBS itself. Ascending; empty when maxBS < 1.
func DecodeCaptureBatches(maxBS int) []int {
	if maxBS < 1 {
		return nil
	}
	var out []int
	add := func(v int) {
		if v <= maxBS {
			out = append(out, v)
		}
	}
	for _, v := range []int{1, 2, 4, 8, 12} {
		add(v)
	}
	for v := 16; v <= 256; v += 8 {
		add(v)
	}
	for v := 272; v <= 496; v += 16 {
		add(v)
	}
	for v := 512; v <= maxBS; v += 32 {
		add(v)
	}
	if out[len(out)-1] != maxBS {
		out = append(out, maxBS)
	}
	return out
}

// PrefillTokenBuckets is the prefill CUDA graph token bucket list up to max
// tokens (§2): {4..32 step 4} ∪ {48..256 step 16} ∪ {288..512 step 32} ∪
// {576..1024 step 64} ∪ {1280..4096 step 256} ∪ {4608.. step 512}, cut at
// max. A max that is not itself a bucket is appended (as for the decode
// list), so the largest bucket always covers max; for the default sizes
// 2048/4096/8192/16384 this gives 42/50/58/74 buckets. Empty when max < 1.
func PrefillTokenBuckets(max int) []int {
	if max < 1 {
		return nil
	}
	var out []int
	step := func(from, to, by int) {
		for v := from; v <= to && v <= max; v += by {
			out = append(out, v)
		}
	}
	step(4, 32, 4)
	step(48, 256, 16)
	step(288, 512, 32)
	step(576, 1024, 64)
	step(1280, 4096, 256)
	step(4608, max, 512)
	if len(out) == 0 || out[len(out)-1] != max {
		out = append(out, max)
	}
	return out
}
