package jinja

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
)

// Values inside the evaluator are Python values:
//
//	nil      None
//	bool     bool
//	int64    int (bounded to 64 bits; overflow is an ErrValue)
//	float64  float
//	string   str
//	[]any    list
//	Tuple    tuple
//	*Dict    dict (insertion ordered)
//
// plus internal kinds for Undefined, namespaces, generators, dict views,
// callables, macros and loop objects.

// Tuple is a Python tuple: a sequence that prints as (a, b).
type Tuple []any

// Dict is an insertion-ordered mapping, as Python's dict. Keys may be any
// hashable value (str, int, float, bool, None, tuple); the exported methods
// cover the common string-keyed case.
type Dict struct {
	keys []any
	vals []any
	idx  map[string]int
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{idx: map[string]int{}} }

// Set stores v under key, keeping the key's first insertion position.
func (d *Dict) Set(key string, v any) { _ = d.setAny(key, v) }

// Get returns the value stored under key.
func (d *Dict) Get(key string) (any, bool) { return d.getAny(key) }

// Keys returns the string keys in insertion order (non-string keys are skipped).
func (d *Dict) Keys() []string {
	out := make([]string, 0, len(d.keys))
	for _, k := range d.keys {
		if s, ok := k.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// Len is the number of entries.
func (d *Dict) Len() int {
	if d == nil {
		return 0
	}
	return len(d.keys)
}

func (d *Dict) setAny(k, v any) error {
	h, err := hashKey(k)
	if err != nil {
		return err
	}
	if i, ok := d.idx[h]; ok {
		d.vals[i] = v
		return nil
	}
	d.idx[h] = len(d.keys)
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	return nil
}

func (d *Dict) getAny(k any) (any, bool) {
	if d == nil {
		return nil, false
	}
	h, err := hashKey(k)
	if err != nil {
		return nil, false
	}
	i, ok := d.idx[h]
	if !ok {
		return nil, false
	}
	return d.vals[i], true
}

func (d *Dict) copyDict() *Dict {
	n := &Dict{keys: append([]any(nil), d.keys...), vals: append([]any(nil), d.vals...), idx: make(map[string]int, len(d.idx))}
	for k, v := range d.idx {
		n.idx[k] = v
	}
	return n
}

// hashKey maps a hashable Python value to a string such that values Python
// considers equal (1, 1.0, True) collide, as they do in a dict.
func hashKey(k any) (string, error) {
	switch v := k.(type) {
	case nil:
		return "N", nil
	case bool:
		if v {
			return "i1", nil
		}
		return "i0", nil
	case int64:
		return "i" + strconv.FormatInt(v, 10), nil
	case float64:
		if v == math.Trunc(v) && math.Abs(v) < 1<<63 {
			return "i" + strconv.FormatInt(int64(v), 10), nil
		}
		return "f" + strconv.FormatFloat(v, 'g', -1, 64), nil
	case string:
		return "s" + v, nil
	case Tuple:
		var b strings.Builder
		b.WriteString("t")
		for _, e := range v {
			h, err := hashKey(e)
			if err != nil {
				return "", err
			}
			b.WriteString(strconv.Itoa(len(h)))
			b.WriteByte(':')
			b.WriteString(h)
		}
		return b.String(), nil
	}
	return "", typeErr("unhashable type: '%s'", typeName(k))
}

// undefined is jinja2's Undefined: printable as "", falsy, iterable as empty,
// but any other use fails with the recorded message. A security undefined
// (an unsafe attribute) fails with ErrSecurity instead.
type undefined struct {
	msg      string
	security bool
}

func (u *undefined) fail() error {
	if u.security {
		return newErr(ErrSecurity, "%s", u.msg)
	}
	return newErr(ErrUndefined, "%s", u.msg)
}

func undefName(name string) *undefined {
	return &undefined{msg: fmt.Sprintf("'%s' is undefined", name)}
}

func undefAttr(obj any, name any) *undefined {
	if s, ok := name.(string); ok {
		return &undefined{msg: fmt.Sprintf("%s has no attribute %s", objectTypeRepr(obj), pyRepr(s))}
	}
	return &undefined{msg: fmt.Sprintf("%s has no element %s", objectTypeRepr(obj), pyRepr(name))}
}

func undefMsg(msg string) *undefined { return &undefined{msg: msg} }

func objectTypeRepr(obj any) string {
	if obj == nil {
		return "None"
	}
	return "'" + typeName(obj) + " object'"
}

// namespace is jinja2's namespace(): the one mutable object templates have.
type namespace struct{ attrs *Dict }

// generator stands for the one-shot iterators jinja2 filters return (map,
// select, reverse, ...). Python treats them differently from lists: always
// truthy, no len(), no indexing, and exhausted after one pass.
type generator struct {
	kind  string
	items []any
	used  bool
}

// view is a dict view (keys(), values(), items()): iterable and sized, it
// only prints differently from a list.
type view struct {
	kind  string
	items []any
}

// rangeValue is Python's lazy range object: a sequence that prints as
// range(start, stop[, step]).
type rangeValue struct{ start, stop, step, n int64 }

func (rg *rangeValue) at(i int64) int64 { return rg.start + i*rg.step }

func (rg *rangeValue) items() []any {
	out := make([]any, rg.n)
	for i := range out {
		out[i] = rg.at(int64(i))
	}
	return out
}

// kwarg is one keyword argument of a call.
type kwarg struct {
	name string
	val  any
}

// funcValue is a builtin callable: a global, a bound method or a loop helper.
type funcValue struct {
	name string
	fn   func(r *renderer, args []any, kw []kwarg) (any, error)
}

// typeName is the Python type name used in error messages and type tests.
func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []any:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *undefined:
		return "Undefined"
	case *namespace:
		return "Namespace"
	case *generator:
		return x.kind
	case *view:
		return x.kind
	case *rangeValue:
		return "range"
	case *funcValue:
		return "builtin_function_or_method"
	case *macroValue:
		return "Macro"
	case *loopValue:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// truthy is Python's bool(v).
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case Tuple:
		return len(x) > 0
	case *Dict:
		return x.Len() > 0
	case *undefined:
		return false
	case *view:
		return len(x.items) > 0
	case *rangeValue:
		return x.n > 0
	}
	return true
}

// fromGo converts a caller-supplied Go value into an evaluator value.
func fromGo(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, *namespace, *funcValue:
		return x, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case int16:
		return int64(x), nil
	case int8:
		return int64(x), nil
	case uint:
		return uintValue(uint64(x))
	case uint64:
		return uintValue(x)
	case uint32:
		return int64(x), nil
	case uint16:
		return int64(x), nil
	case uint8:
		return int64(x), nil
	case float32:
		return float64(x), nil
	case json.Number:
		return numberFromJSON(string(x))
	case json.RawMessage:
		return DecodeJSON(x)
	case *Dict:
		if x == nil {
			return nil, nil
		}
		return x, nil
	case Tuple:
		out := make(Tuple, len(x))
		for i, e := range x {
			c, err := fromGo(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			c, err := fromGo(e)
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case map[string]any:
		return mapFromGo(reflect.ValueOf(x))
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil, nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			c, err := fromGo(rv.Index(i).Interface())
			if err != nil {
				return nil, err
			}
			out[i] = c
		}
		return out, nil
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil, typeErr("unsupported map key type %s", rv.Type().Key())
		}
		if rv.IsNil() {
			return nil, nil
		}
		return mapFromGo(rv)
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil, nil
		}
		return fromGo(rv.Elem().Interface())
	case reflect.String:
		return rv.String(), nil
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return uintValue(rv.Uint())
	case reflect.Float32, reflect.Float64:
		return rv.Float(), nil
	}
	return nil, typeErr("unsupported value of Go type %T", v)
}

func uintValue(u uint64) (any, error) {
	if u > math.MaxInt64 {
		return nil, valueErr("integer %d out of range", u)
	}
	return int64(u), nil
}

// mapFromGo takes a Go map's keys in sorted order: Go maps have no insertion
// order, and sorting keeps renders deterministic.
func mapFromGo(rv reflect.Value) (any, error) {
	keys := make([]string, 0, rv.Len())
	for _, k := range rv.MapKeys() {
		keys = append(keys, k.String())
	}
	sort.Strings(keys)
	d := NewDict()
	for _, k := range keys {
		c, err := fromGo(rv.MapIndex(reflect.ValueOf(k).Convert(rv.Type().Key())).Interface())
		if err != nil {
			return nil, err
		}
		d.Set(k, c)
	}
	return d, nil
}
