package budget

import (
	"slices"
	"testing"
)

func TestDefaultsByDeviceClass(t *testing.T) {
	tests := []struct {
		name          string
		mem           float64
		chunk         int
		bsSmall, bsTP int
	}{
		{"unknown", 0, 4096, 160, 160},
		{"negative unknown", -1, 4096, 160, 160},
		{"16G", 16 * 1024, 2048, 8, 8},
		{"just below 20G", 20*1024 - 1, 2048, 8, 8},
		{"20G", 20 * 1024, 4096, 48, 160},
		{"RTX 4090", 24564, 4096, 48, 160},
		{"35G", 35 * 1024, 4096, 32, 160},
		{"48G", 48 * 1024, 4096, 32, 160},
		{"60G", 60 * 1024, 8192, 256, 512},
		{"H100", 81559, 8192, 256, 512},
		{"90G", 90 * 1024, 8192, 256, 512},
		{"H200", 143771, 8192, 256, 512},
		{"160G", 160 * 1024, 16384, 512, 512},
		{"B200", 183359, 16384, 512, 512},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := ChunkedPrefillSize(tc.mem); got != tc.chunk {
				t.Errorf("ChunkedPrefillSize = %d, want %d", got, tc.chunk)
			}
			if got := GraphMaxBatch(tc.mem, 1); got != tc.bsSmall {
				t.Errorf("GraphMaxBatch(tp1) = %d, want %d", got, tc.bsSmall)
			}
			if got := GraphMaxBatch(tc.mem, 3); got != tc.bsSmall {
				t.Errorf("GraphMaxBatch(tp3) = %d, want %d", got, tc.bsSmall)
			}
			if got := GraphMaxBatch(tc.mem, 4); got != tc.bsTP {
				t.Errorf("GraphMaxBatch(tp4) = %d, want %d", got, tc.bsTP)
			}
		})
	}
}

// refSet builds a list from a membership predicate over 1..limit, an
// independent formulation of the §2 unions.
func refSet(limit int, in func(v int) bool) []int {
	var out []int
	for v := 1; v <= limit; v++ {
		if in(v) {
			out = append(out, v)
		}
	}
	return out
}

func refDecode(maxBS int) []int {
	out := refSet(maxBS, func(v int) bool {
		switch {
		case v == 1 || v == 2 || v == 4 || v == 8 || v == 12:
			return true
		case v >= 16 && v <= 256:
			return v%8 == 0
		case v >= 272 && v <= 496:
			return (v-272)%16 == 0
		case v >= 512:
			return (v-512)%32 == 0
		}
		return false
	})
	if len(out) == 0 || out[len(out)-1] != maxBS {
		out = append(out, maxBS)
	}
	return out
}

func refPrefill(max int) []int {
	out := refSet(max, func(v int) bool {
		switch {
		case v <= 32:
			return v%4 == 0
		case v >= 48 && v <= 256:
			return v%16 == 0
		case v >= 288 && v <= 512:
			return v%32 == 0
		case v >= 576 && v <= 1024:
			return v%64 == 0
		case v >= 1280 && v <= 4096:
			return v%256 == 0
		case v >= 4608:
			return v%512 == 0
		}
		return false
	})
	if len(out) == 0 || out[len(out)-1] != max {
		out = append(out, max)
	}
	return out
}

func TestDecodeCaptureBatches(t *testing.T) {
	b := DecodeCaptureBatches(256)
	if len(b) != 36 {
		t.Errorf("len(DecodeCaptureBatches(256)) = %d, want 36 (V10)", len(b))
	}
	sum := 0
	for _, v := range b {
		sum += v
	}
	if sum != 4243 {
		t.Errorf("Σbs(256) = %d, want 4243 (V10)", sum)
	}
	if got := DecodeCaptureBatches(8); !slices.Equal(got, []int{1, 2, 4, 8}) {
		t.Errorf("DecodeCaptureBatches(8) = %v", got)
	}
	if got := DecodeCaptureBatches(10); !slices.Equal(got, []int{1, 2, 4, 8, 10}) {
		t.Errorf("DecodeCaptureBatches(10) = %v", got)
	}
	if got := DecodeCaptureBatches(0); got != nil {
		t.Errorf("DecodeCaptureBatches(0) = %v, want nil", got)
	}
	for _, m := range []int{1, 3, 12, 48, 160, 255, 256, 300, 496, 512, 520, 544, 1024, 1000} {
		if got, want := DecodeCaptureBatches(m), refDecode(m); !slices.Equal(got, want) {
			t.Errorf("DecodeCaptureBatches(%d) = %v, want %v", m, got, want)
		}
	}
}

func TestPrefillTokenBuckets(t *testing.T) {
	for max, n := range map[int]int{2048: 42, 4096: 50, 8192: 58, 16384: 74} {
		if got := len(PrefillTokenBuckets(max)); got != n {
			t.Errorf("len(PrefillTokenBuckets(%d)) = %d, want %d (§2)", max, got, n)
		}
	}
	for _, m := range []int{1, 4, 5, 100, 2048, 3000, 4096, 5000, 8192, 16384, 20000} {
		if got, want := PrefillTokenBuckets(m), refPrefill(m); !slices.Equal(got, want) {
			t.Errorf("PrefillTokenBuckets(%d) = %v, want %v", m, got, want)
		}
	}
	if got := PrefillTokenBuckets(0); got != nil {
		t.Errorf("PrefillTokenBuckets(0) = %v, want nil", got)
	}
}
