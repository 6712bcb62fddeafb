package gguf

import (
	"math"
	"reflect"
	"testing"
)

func TestValueAccessors(t *testing.T) {
	type want struct {
		u     uint64
		uok   bool
		i     int64
		iok   bool
		f     float64
		fok   bool
		isStr bool
	}
	cases := []struct {
		v Value
		w want
	}{
		{NewUint8(255), want{255, true, 255, true, 255, true, false}},
		{NewInt8(-1), want{0, false, -1, true, -1, true, false}},
		{NewInt8(7), want{7, true, 7, true, 7, true, false}},
		{NewUint16(65535), want{65535, true, 65535, true, 65535, true, false}},
		{NewInt16(-32768), want{0, false, -32768, true, -32768, true, false}},
		{NewUint32(math.MaxUint32), want{math.MaxUint32, true, math.MaxUint32, true, math.MaxUint32, true, false}},
		{NewInt32(math.MinInt32), want{0, false, math.MinInt32, true, math.MinInt32, true, false}},
		{NewUint64(math.MaxUint64), want{math.MaxUint64, true, 0, false, math.MaxUint64, true, false}},
		{NewInt64(math.MinInt64), want{0, false, math.MinInt64, true, math.MinInt64, true, false}},
		{NewFloat32(0.25), want{0, false, 0, false, 0.25, true, false}},
		{NewFloat64(-1e300), want{0, false, 0, false, -1e300, true, false}},
		{NewString("x"), want{isStr: true}},
		{NewBool(true), want{}},
	}
	for _, c := range cases {
		u, uok := c.v.Uint()
		i, iok := c.v.Int()
		f, fok := c.v.Float()
		_, sok := c.v.String()
		got := want{u, uok, i, iok, f, fok, sok}
		if got != c.w {
			t.Errorf("%s value: got %+v, want %+v", c.v.Type, got, c.w)
		}
	}
	if b, ok := NewBool(true).Bool(); !ok || !b {
		t.Error("NewBool(true).Bool()")
	}
	if _, ok := NewUint8(1).Bool(); ok {
		t.Error("uint8 read as bool")
	}
}

func TestArrayAccessors(t *testing.T) {
	s := NewStringArray([]string{"a", "b"})
	if got, ok := s.Strings(); !ok || !reflect.DeepEqual(got, []string{"a", "b"}) || s.Len() != 2 {
		t.Fatalf("Strings = %v %v", got, ok)
	}
	if _, ok := s.Floats(); ok {
		t.Fatal("string array read as floats")
	}
	fl := NewFloat32Array([]float32{1.5, -2})
	if got, ok := fl.Floats(); !ok || !reflect.DeepEqual(got, []float32{1.5, -2}) {
		t.Fatalf("Floats = %v", got)
	}
	if _, ok := fl.Ints(); ok {
		t.Fatal("float array read as ints")
	}
	in := NewInt32Array([]int32{-3, 4})
	if got, ok := in.Ints(); !ok || !reflect.DeepEqual(got, []int64{-3, 4}) {
		t.Fatalf("Ints = %v", got)
	}
	if e, ok := in.Index(0); !ok || e.Type != TypeInt32 {
		t.Fatal("Index(0)")
	} else if x, _ := e.Int(); x != -3 {
		t.Fatalf("Index(0) = %d", x)
	}
	if _, ok := in.Index(2); ok {
		t.Fatal("Index out of range succeeded")
	}
	big, _ := NewArray(TypeUint64, []Value{NewUint64(math.MaxUint64)})
	if _, ok := big.Ints(); ok {
		t.Fatal("uint64 max fit in int64")
	}
	if _, ok := NewArray(TypeUint8, []Value{NewInt8(1)}); ok {
		t.Fatal("mixed array built")
	}
	if NewUint8(3).Len() != 0 {
		t.Fatal("scalar has length")
	}
	// Returned slices are copies.
	got, _ := fl.Floats()
	got[0] = 99
	if again, _ := fl.Floats(); again[0] != 1.5 {
		t.Fatal("Floats aliases the value")
	}
}

func TestTensorTypeSizes(t *testing.T) {
	cases := []struct {
		typ  TensorType
		dims []uint64
		want uint64
	}{
		{TypeF32, []uint64{64, 512}, 64 * 512 * 4},
		{TypeF16, []uint64{3}, 6},
		{TypeBF16, []uint64{8, 2}, 32},
		{TypeQ8_0, []uint64{64, 3}, 2 * 34 * 3},
		{TypeQ4_K, []uint64{512}, 2 * 144},
		{TypeF32, nil, 4},
		{TypeF32, []uint64{0, 5}, 0},
	}
	for _, c := range cases {
		got, err := c.typ.Bytes(c.dims)
		if err != nil || got != c.want {
			t.Errorf("%s%v: %d, %v; want %d", c.typ, c.dims, got, err, c.want)
		}
	}
	if _, err := TypeQ8_0.RowBytes(31); err == nil {
		t.Error("partial Q8_0 block accepted")
	}
	if _, err := TensorType(5).RowBytes(1); err == nil {
		t.Error("removed type 5 accepted")
	}
	if _, err := TypeF32.Bytes([]uint64{1 << 62, 8}); err == nil {
		t.Error("overflow accepted")
	}
	if TypeQ8_0.String() != "Q8_0" || TensorType(77).String() != "TensorType(77)" || TypeArray.String() != "ARRAY" {
		t.Error("names")
	}
}
