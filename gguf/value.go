package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// ValueType is the type tag of a GGUF metadata value.
type ValueType uint32

// Metadata value types, as numbered by the GGUF format.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

var valueTypeNames = [...]string{
	"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
	"bool", "string", "array", "uint64", "int64", "float64",
}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(t))
}

// size is the encoded size of a fixed-size scalar, 0 for string and array
// (variable) and for unknown types.
func (t ValueType) size() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

func (t ValueType) isUnsigned() bool {
	return t == TypeUint8 || t == TypeUint16 || t == TypeUint32 || t == TypeUint64
}

func (t ValueType) isSigned() bool {
	return t == TypeInt8 || t == TypeInt16 || t == TypeInt32 || t == TypeInt64
}

// KV is one metadata entry.
type KV struct {
	Key   string
	Value Value
}

// Value is a metadata value: a scalar, or an array of one element type.
//
// Scalars keep their bits in num: unsigned integers zero-extended, signed
// integers as the two's complement of the sign-extended value, floats as
// float64 bits, bools as 0 or 1. Arrays of fixed-size elements keep a copy
// of their little-endian bytes and decode on access, so a hostile file
// cannot inflate memory beyond its own size by declaring wide conversions;
// string arrays keep []string and nested arrays []Value, both shared with
// callers and not to be modified.
type Value struct {
	Type ValueType
	elem ValueType // element type, arrays only
	num  uint64
	str  string
	arr  any // []byte, []string or []Value, arrays only
}

// ElemType is the element type of an array value; for scalars it is the
// value's own type.
func (v Value) ElemType() ValueType {
	if v.Type == TypeArray {
		return v.elem
	}
	return v.Type
}

// Len is the number of array elements; 0 for scalars.
func (v Value) Len() int {
	switch a := v.arr.(type) {
	case []byte:
		return len(a) / v.elem.size()
	case []string:
		return len(a)
	case []Value:
		return len(a)
	}
	return 0
}

// Index returns element i of an array as a scalar (or nested array) Value;
// ok is false for scalars and out-of-range indexes.
func (v Value) Index(i int) (Value, bool) {
	if i < 0 || i >= v.Len() {
		return Value{}, false
	}
	switch a := v.arr.(type) {
	case []byte:
		n := v.elem.size()
		return Value{Type: v.elem, num: decodeScalar(v.elem, a[i*n:(i+1)*n])}, true
	case []string:
		return Value{Type: TypeString, str: a[i]}, true
	case []Value:
		return a[i], true
	}
	return Value{}, false
}

// decodeScalar converts the little-endian encoding b of a fixed-size scalar
// of type t to the num representation.
func decodeScalar(t ValueType, b []byte) uint64 {
	switch t {
	case TypeUint8:
		return uint64(b[0])
	case TypeInt8:
		return uint64(int64(int8(b[0])))
	case TypeBool:
		// Any non-zero byte is true, as in C; writers only emit 0 and 1.
		if b[0] != 0 {
			return 1
		}
		return 0
	case TypeUint16:
		return uint64(binary.LittleEndian.Uint16(b))
	case TypeInt16:
		return uint64(int64(int16(binary.LittleEndian.Uint16(b))))
	case TypeUint32:
		return uint64(binary.LittleEndian.Uint32(b))
	case TypeInt32:
		return uint64(int64(int32(binary.LittleEndian.Uint32(b))))
	case TypeFloat32:
		return math.Float64bits(float64(math.Float32frombits(binary.LittleEndian.Uint32(b))))
	default: // TypeUint64, TypeInt64, TypeFloat64
		return binary.LittleEndian.Uint64(b)
	}
}

// each calls fn with every element of a fixed-size array in num encoding,
// stopping early when fn returns false. It reports false when v is not an
// array whose element type satisfies match, or when fn stopped it.
func (v Value) each(match func(ValueType) bool, fn func(i int, num uint64) bool) bool {
	raw, ok := v.arr.([]byte)
	if !ok || !match(v.elem) {
		return false
	}
	n := v.elem.size()
	for i := 0; i < len(raw)/n; i++ {
		if !fn(i, decodeScalar(v.elem, raw[i*n:(i+1)*n])) {
			return false
		}
	}
	return true
}

func is(t ValueType) func(ValueType) bool { return func(e ValueType) bool { return e == t } }

func isInteger(t ValueType) bool { return t.isSigned() || t.isUnsigned() }

// AsString returns a string scalar.
func (v Value) AsString() (string, bool) {
	if v.Type != TypeString {
		return "", false
	}
	return v.str, true
}

// AsUint returns any integer scalar that is non-negative.
func (v Value) AsUint() (uint64, bool) {
	switch {
	case v.Type.isUnsigned():
		return v.num, true
	case v.Type.isSigned() && int64(v.num) >= 0:
		return v.num, true
	}
	return 0, false
}

// AsInt returns any integer scalar that fits in int64.
func (v Value) AsInt() (int64, bool) {
	switch {
	case v.Type.isSigned():
		return int64(v.num), true
	case v.Type.isUnsigned() && v.num <= math.MaxInt64:
		return int64(v.num), true
	}
	return 0, false
}

// AsFloat returns a float32 or float64 scalar.
func (v Value) AsFloat() (float64, bool) {
	if v.Type != TypeFloat32 && v.Type != TypeFloat64 {
		return 0, false
	}
	return math.Float64frombits(v.num), true
}

// AsBool returns a bool scalar.
func (v Value) AsBool() (bool, bool) {
	if v.Type != TypeBool {
		return false, false
	}
	return v.num != 0, true
}

// AsStrings returns an array of strings. The slice is shared; do not modify
// it.
func (v Value) AsStrings() ([]string, bool) {
	a, ok := v.arr.([]string)
	return a, ok
}

// AsArrays returns the elements of an array of arrays. The slice is shared;
// do not modify it.
func (v Value) AsArrays() ([]Value, bool) {
	a, ok := v.arr.([]Value)
	return a, ok
}

// AsFloat32s returns an array of float32 as a new slice.
func (v Value) AsFloat32s() ([]float32, bool) {
	out := make([]float32, v.Len())
	ok := v.each(is(TypeFloat32), func(i int, num uint64) bool {
		out[i] = float32(math.Float64frombits(num))
		return true
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// AsFloat64s returns an array of float32 or float64 as a new float64
// slice.
func (v Value) AsFloat64s() ([]float64, bool) {
	out := make([]float64, v.Len())
	isFloat := func(t ValueType) bool { return t == TypeFloat32 || t == TypeFloat64 }
	ok := v.each(isFloat, func(i int, num uint64) bool {
		out[i] = math.Float64frombits(num)
		return true
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// AsBools returns an array of bools as a new slice.
func (v Value) AsBools() ([]bool, bool) {
	out := make([]bool, v.Len())
	ok := v.each(is(TypeBool), func(i int, num uint64) bool {
		out[i] = num != 0
		return true
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// AsInt32s converts an array of any integer type to a new int32 slice; ok
// is false when the value is not an integer array or an element does not
// fit.
func (v Value) AsInt32s() ([]int32, bool) {
	out := make([]int32, v.Len())
	signed := v.elem.isSigned()
	ok := v.each(isInteger, func(i int, num uint64) bool {
		if (signed && (int64(num) < math.MinInt32 || int64(num) > math.MaxInt32)) || (!signed && num > math.MaxInt32) {
			return false
		}
		out[i] = int32(num)
		return true
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// AsInt64s converts an array of any integer type to a new int64 slice; ok
// is false when the value is not an integer array or an element does not
// fit.
func (v Value) AsInt64s() ([]int64, bool) {
	out := make([]int64, v.Len())
	signed := v.elem.isSigned()
	ok := v.each(isInteger, func(i int, num uint64) bool {
		if !signed && num > math.MaxInt64 {
			return false
		}
		out[i] = int64(num)
		return true
	})
	if !ok {
		return nil, false
	}
	return out, true
}

// String formats the value for logs; arrays are summarized.
func (v Value) String() string {
	switch {
	case v.Type == TypeString:
		return fmt.Sprintf("%q", v.str)
	case v.Type == TypeBool:
		return fmt.Sprint(v.num != 0)
	case v.Type == TypeFloat32 || v.Type == TypeFloat64:
		return fmt.Sprint(math.Float64frombits(v.num))
	case v.Type.isUnsigned():
		return fmt.Sprint(v.num)
	case v.Type.isSigned():
		return fmt.Sprint(int64(v.num))
	case v.Type == TypeArray:
		return fmt.Sprintf("[%d x %s]", v.Len(), v.elem)
	}
	return v.Type.String()
}
