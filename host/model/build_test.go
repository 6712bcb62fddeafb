package model

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/kvhost/kvhost/host/alloc"
	"github.com/kvhost/kvhost/host/device"
	"github.com/kvhost/kvhost/host/device/cpu"
)

// mapSource serves F32 tensors from memory.
type mapSource map[string]struct {
	dims []int
	vals []float32
}

func (s mapSource) tensor(name string) ([]byte, device.DType, []int, bool, error) {
	t, ok := s[name]
	if !ok {
		return nil, 0, nil, false, nil
	}
	raw := make([]byte, 4*len(t.vals))
	for i, v := range t.vals {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	return raw, device.F32, t.dims, true, nil
}

func (s mapSource) progressTotal() int64 { return 0 }

// TestBuilderStacked: a {cols, rows, n} tensor loads as one weight of n·rows
// rows in stored order (matrix e at rows e·rows …), the dry build gives the
// same shape with no memory, and a tensor of another shape is refused
// naming it.
func TestBuilderStacked(t *testing.T) {
	dev, err := cpu.New(device.Options{MemoryBytes: 1 << 24, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	const n, rows, cols = 3, 2, 4
	vals := make([]float32, n*rows*cols)
	for i := range vals {
		vals[i] = float32(i)
	}
	src := mapSource{"exps": {[]int{cols, rows, n}, vals}, "flat": {[]int{cols, n * rows}, vals}}
	o := Options{Device: dev, Weights: alloc.NewDirect("weights", dev), Activations: alloc.New("caching", dev)}
	m := &Model{dev: dev, k: dev.Kernels(), weights: o.Weights}
	b := &Builder{m: m, u: &uploader{m: m, src: src, o: o}}
	w, err := b.Stacked("exps", n, rows, cols)
	if err != nil {
		t.Fatal(err)
	}
	if w.Rows != n*rows || w.Cols != cols || w.Bytes != 4*n*rows*cols {
		t.Fatalf("stacked weight %+v", w)
	}
	raw, err := dev.Bytes(w.Ptr, w.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for e := range n {
		for r := range rows {
			got := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*((e*rows+r)*cols):]))
			if want := float32((e*rows + r) * cols); got != want {
				t.Fatalf("expert %d row %d starts with %v, want %v", e, r, got, want)
			}
		}
	}
	if _, err := b.Stacked("flat", n, rows, cols); err == nil || !strings.Contains(err.Error(), "flat has shape [4 6], want [4 2 3]") {
		t.Fatalf("a 2-D tensor loaded as a stack: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	dry := &Builder{m: &Model{}}
	if w, err := dry.Stacked("exps", n, rows, cols); err != nil || w.Ptr == 0 || w.Rows != n*rows || w.Cols != cols {
		t.Fatalf("dry stacked weight %+v, %v", w, err)
	}
	if ts := dry.tensors; len(ts) != 1 || ts[0] != (TensorShape{Name: "exps", Rows: n * rows, Cols: cols}) {
		t.Fatalf("dry build recorded %+v", ts)
	}
}
