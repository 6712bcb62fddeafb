package cuda

import (
	"fmt"
	"sort"
)

// DecodeBuckets returns the batch sizes decode graphs are captured for, up
// to max: 1, 2, 4, 8, then every 8 to 256, then every 16 (the vLLM/SGLang
// shape). The list is ascending; capture runs it largest first so smaller
// graphs reuse the largest one's memory.
func DecodeBuckets(max int) []int {
	var out []int
	for _, b := range []int{1, 2, 4, 8} {
		if b <= max {
			out = append(out, b)
		}
	}
	for b := 16; b <= max && b <= 256; b += 8 {
		out = append(out, b)
	}
	for b := 272; b <= max; b += 16 {
		out = append(out, b)
	}
	if len(out) > 0 && out[len(out)-1] != max && max > 0 {
		out = append(out, max)
	}
	return out
}

// PadTable maps every batch size 1..max(buckets) to the smallest bucket that
// holds it (index 0 unused). buckets must be ascending and positive.
func PadTable(buckets []int) ([]int, error) {
	if len(buckets) == 0 {
		return nil, fmt.Errorf("cuda: no buckets")
	}
	if !sort.IntsAreSorted(buckets) || buckets[0] <= 0 {
		return nil, fmt.Errorf("cuda: buckets %v must be positive and ascending", buckets)
	}
	top := buckets[len(buckets)-1]
	t := make([]int, top+1)
	j := 0
	for n := 1; n <= top; n++ {
		for buckets[j] < n {
			j++
		}
		t[n] = buckets[j]
	}
	return t, nil
}

// Pad returns the bucket for a batch of n, or false when n exceeds the
// largest bucket (the step runs eagerly).
func Pad(table []int, n int) (int, bool) {
	if n <= 0 || n >= len(table) {
		return 0, false
	}
	return table[n], true
}
