package budget

import (
	"math/rand/v2"
	"testing"
)

func TestAllocatorBlockV12(t *testing.T) {
	tests := []struct {
		size           int64
		block, segment int64
		split          bool
	}{
		{1000, 1024, 2 << 20, true},
		{1, 512, 2 << 20, true},
		{512, 512, 2 << 20, true},
		{1 << 20, 1 << 20, 2 << 20, true},        // small pool upper edge
		{4104192, 4104192, 20 << 20, true},       // V12: split, 16 867 328 stays cached
		{19 << 20, 20 << 20, 20 << 20, false},    // 2 MiB rounding leaves exactly 1 MiB: no split
		{131334144, 132120576, 132120576, false}, // V12
		{873799680, 874512384, 874512384, false}, // V3 per-layer K buffer
		{(10 << 20) - 512, 10<<20 - 512, 20 << 20, true},
		{10 << 20, 10 << 20, 10 << 20, false},
		{(11 << 20) + 1, 12 << 20, 12 << 20, false}, // 1 MiB − 512 remains: not > 1 MiB
		{0, 0, 0, false},
	}
	for _, tc := range tests {
		b, s, sp := AllocatorBlock(tc.size)
		if b != tc.block || s != tc.segment || sp != tc.split {
			t.Errorf("AllocatorBlock(%d) = %d, %d, %v; want %d, %d, %v", tc.size, b, s, sp, tc.block, tc.segment, tc.split)
		}
	}
	if _, s, _ := AllocatorBlock(4104192); s-4104192 != 16867328 {
		t.Errorf("V12 cached remainder = %d", s-4104192)
	}
	b, _, _ := AllocatorBlock(873799680)
	if extra := 64 * (b - 873799680); extra != 45613056 {
		t.Errorf("V12 64 buffers cost %d more, want 45 613 056", extra)
	}
}

// refAllocatorBlock is a second formulation of §6 by byte ranges.
func refAllocatorBlock(size int64) (int64, int64, bool) {
	r := ((max(size, 1) + 511) / 512) * 512
	var seg int64
	if r <= 1<<20 {
		seg = 2 << 20
		if seg-r >= 512 {
			return r, seg, true
		}
		return seg, seg, false
	}
	if r < 10<<20 {
		seg = 20 << 20
	} else {
		seg = ((r + (2 << 20) - 1) >> 21) << 21
	}
	if seg-r > 1<<20 {
		return r, seg, true
	}
	return seg, seg, false
}

func TestAllocatorBlockReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 50000 {
		size := rng.Int64N(1 << (1 + rng.IntN(34)))
		if size == 0 {
			continue
		}
		b, s, sp := AllocatorBlock(size)
		rb, rs, rsp := refAllocatorBlock(size)
		if b != rb || s != rs || sp != rsp {
			t.Fatalf("AllocatorBlock(%d) = %d %d %v, reference %d %d %v", size, b, s, sp, rb, rs, rsp)
		}
		if b < size || s < b {
			t.Fatalf("AllocatorBlock(%d) = %d %d: block must hold the request and fit the segment", size, b, s)
		}
	}
}

func FuzzAllocatorBlock(f *testing.F) {
	f.Add(int64(1000))
	f.Add(int64(131334144))
	f.Fuzz(func(t *testing.T, size int64) {
		if size <= 0 || size > 1<<50 {
			return
		}
		b, s, sp := AllocatorBlock(size)
		rb, rs, rsp := refAllocatorBlock(size)
		if b != rb || s != rs || sp != rsp {
			t.Fatalf("AllocatorBlock(%d) = %d %d %v, reference %d %d %v", size, b, s, sp, rb, rs, rsp)
		}
	})
}
