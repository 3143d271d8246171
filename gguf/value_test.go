package gguf

import (
	"encoding/binary"
	"math"
	"reflect"
	"testing"
)

// arrayOf builds an array Value the way the reader does.
func arrayOf(elem ValueType, raw []byte) Value {
	return Value{Type: TypeArray, elem: elem, arr: raw}
}

func le16(vs ...uint16) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint16(b, v)
	}
	return b
}

func le64(vs ...uint64) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func TestValueArrays(t *testing.T) {
	type conv struct {
		i32 []int32
		i64 []int64
		f64 []float64
	}
	tests := []struct {
		name string
		v    Value
		len  int
		want conv
	}{
		{"uint8", arrayOf(TypeUint8, []byte{0, 255}), 2, conv{[]int32{0, 255}, []int64{0, 255}, nil}},
		{"int8", arrayOf(TypeInt8, []byte{0x80, 1}), 2, conv{[]int32{-128, 1}, []int64{-128, 1}, nil}},
		{"int16", arrayOf(TypeInt16, le16(0xffff, 7)), 2, conv{[]int32{-1, 7}, []int64{-1, 7}, nil}},
		{"uint64 too big for int32", arrayOf(TypeUint64, le64(1<<31)), 1, conv{nil, []int64{1 << 31}, nil}},
		{"uint64 too big for int64", arrayOf(TypeUint64, le64(math.MaxUint64)), 1, conv{nil, nil, nil}},
		{"int64 below int32", arrayOf(TypeInt64, le64(uint64(1)<<63)), 1, conv{nil, []int64{math.MinInt64}, nil}},
		{"float64", arrayOf(TypeFloat64, le64(math.Float64bits(0.5))), 1, conv{nil, nil, []float64{0.5}}},
		{"empty uint32", arrayOf(TypeUint32, nil), 0, conv{[]int32{}, []int64{}, nil}},
		{"strings", Value{Type: TypeArray, elem: TypeString, arr: []string{"x"}}, 1, conv{}},
		{"scalar", Value{Type: TypeUint32, num: 3}, 0, conv{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.Len(); got != tc.len {
				t.Errorf("Len = %d, want %d", got, tc.len)
			}
			i32, _ := tc.v.AsInt32s()
			i64, _ := tc.v.AsInt64s()
			f64, _ := tc.v.AsFloat64s()
			if !reflect.DeepEqual(i32, tc.want.i32) || !reflect.DeepEqual(i64, tc.want.i64) || !reflect.DeepEqual(f64, tc.want.f64) {
				t.Errorf("got %v %v %v, want %v %v %v", i32, i64, f64, tc.want.i32, tc.want.i64, tc.want.f64)
			}
		})
	}
}

func TestValueIndex(t *testing.T) {
	v := arrayOf(TypeInt16, le16(0xfffe, 3))
	e, ok := v.Index(0)
	if n, _ := e.AsInt(); !ok || e.Type != TypeInt16 || n != -2 {
		t.Errorf("Index(0) = %v %v", e, ok)
	}
	if _, ok := v.Index(2); ok {
		t.Error("Index past the end succeeded")
	}
	if _, ok := v.Index(-1); ok {
		t.Error("negative Index succeeded")
	}
	s := Value{Type: TypeArray, elem: TypeString, arr: []string{"a", "b"}}
	if e, ok := s.Index(1); !ok || e.str != "b" {
		t.Errorf("string Index = %v %v", e, ok)
	}
	if _, ok := (Value{Type: TypeBool, num: 1}).Index(0); ok {
		t.Error("scalar Index succeeded")
	}
	if got := v.String(); got != "[2 x int16]" {
		t.Errorf("String = %q", got)
	}
}
