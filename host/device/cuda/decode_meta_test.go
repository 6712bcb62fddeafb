package cuda

import (
	"slices"
	"strings"
	"testing"
)

func TestDecodeGeometryEncode(t *testing.T) {
	g := decodeGeometry{pageSize: 4, slots: 40, stride: 3, maxLen: 12}
	cases := []struct {
		name      string
		positions []int32
		tables    [][]int32
		want      []int32
		err       string
	}{
		{"two rows, padded tables", []int32{0, 9}, [][]int32{{5}, {1, 2, 9}},
			[]int32{0, 9, 5, 0, 0, 1, 2, 9}, ""},
		{"short table padded with zeros", []int32{5}, [][]int32{{3, 4}}, []int32{5, 3, 4, 0}, ""},
		{"position past the context", []int32{12}, [][]int32{{1, 2, 3}}, nil, "outside [0, 12)"},
		{"negative position", []int32{-1}, [][]int32{{1}}, nil, "outside [0, 12)"},
		{"table longer than captured", []int32{0}, [][]int32{{1, 2, 3, 4}}, nil, "captured with 3"},
		{"table too short for its position", []int32{4}, [][]int32{{1}}, nil, "needs 2 pages"},
		{"page outside the cache", []int32{0}, [][]int32{{10}}, nil, "outside the KV cache"},
		{"unused page is not checked", []int32{0}, [][]int32{{9, 99}}, []int32{0, 9, 99, 0}, ""},
		{"missing table", []int32{0, 1}, [][]int32{{1}}, nil, "2 positions, 1 page tables"},
	}
	// With a window of 5, a row at 9 reads positions 5..9: pages 1 and 2;
	// page 0 may have been released (-1) and is copied, never checked.
	gw := g
	gw.window = 5
	dst := make([]int32, 1+g.stride)
	if err := gw.encode(dst, []int32{9}, [][]int32{{-1, 2, 9}}); err != nil || !slices.Equal(dst, []int32{9, -1, 2, 9}) {
		t.Errorf("windowed row over a released page: %v, %v", dst, err)
	}
	if err := gw.encode(dst, []int32{9}, [][]int32{{1, -1, 9}}); err == nil || !strings.Contains(err.Error(), "page -1") {
		t.Errorf("released page inside the window: %v", err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows := len(c.positions)
			dst := make([]int32, rows+rows*g.stride)
			for i := range dst {
				dst[i] = -7 // stale contents must be overwritten
			}
			err := g.encode(dst, c.positions, c.tables)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(dst, c.want) {
				t.Fatalf("encoded %v, want %v", dst, c.want)
			}
		})
	}
	if err := g.encode(make([]int32, 3), []int32{0}, [][]int32{{1}}); err == nil {
		t.Fatal("a destination of the wrong size was accepted")
	}
}

// TestDecodeMetaFeedsKernelIndexing checks the layout against the kernels'
// indexing (write_kv_rows / decode_attention: position meta[r], page
// table meta + rows + r*stride) with an independent slot computation.
func TestDecodeMetaFeedsKernelIndexing(t *testing.T) {
	g := decodeGeometry{pageSize: 16, slots: 16 * 64, stride: 8, maxLen: 128}
	positions := []int32{0, 17, 127, 40}
	tables := [][]int32{{3}, {7, 2}, {0, 1, 2, 3, 4, 5, 6, 63}, {9, 8, 11}}
	rows := len(positions)
	meta := make([]int32, rows+rows*g.stride)
	if err := g.encode(meta, positions, tables); err != nil {
		t.Fatal(err)
	}
	for r := range rows {
		pos := int(meta[r])
		pt := meta[rows+r*g.stride:]
		slot := int(pt[pos/g.pageSize])*g.pageSize + pos%g.pageSize
		want := int(tables[r][int(positions[r])/16])*16 + int(positions[r])%16
		if slot != want {
			t.Fatalf("row %d: kernel slot %d, want %d", r, slot, want)
		}
	}
}
