package jinja

import (
	"math"
	"math/bits"
	"strings"
	"unicode/utf8"
)

// asNumber reports v as a number the way Python's numeric tower sees it:
// bool is an int.
func asNumber(v any) (i int64, f float64, isFloat, ok bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, 0, false, true
		}
		return 0, 0, false, true
	case int64:
		return x, 0, false, true
	case float64:
		return 0, x, true, true
	}
	return 0, 0, false, false
}

func toFloat(v any) (float64, bool) {
	i, f, isF, ok := asNumber(v)
	if !ok {
		return 0, false
	}
	if isF {
		return f, true
	}
	return float64(i), true
}

func toInt(v any) (int64, error) {
	i, f, isF, ok := asNumber(v)
	if !ok {
		return 0, typeErr("'%s' object cannot be interpreted as an integer", typeName(v))
	}
	if isF {
		if math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) >= 1<<63 {
			return 0, valueErr("cannot convert float %s to integer", floatRepr(f))
		}
		return int64(f), nil
	}
	return i, nil
}

// indexInt is an integer usable as an index: int or bool, not float.
func indexInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	}
	return 0, false
}

func overflow() error {
	return valueErr("integer result does not fit in 64 bits (Python would use a big integer)")
}

func unsupportedOperand(op string, l, r any) error {
	return typeErr("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

func (r *renderer) binary(op string, l, rv any) (any, error) {
	if op == "~" {
		s := r.str(l) + r.str(rv)
		return s, r.checkSize(len(s))
	}
	if u, ok := l.(*undefined); ok {
		return nil, u.fail()
	}
	if u, ok := rv.(*undefined); ok {
		return nil, u.fail()
	}
	li, lf, lIsF, lNum := asNumber(l)
	ri, rf, rIsF, rNum := asNumber(rv)
	if lNum && rNum {
		if !lIsF && !rIsF {
			return intOp(op, li, ri)
		}
		if !lIsF {
			lf = float64(li)
		}
		if !rIsF {
			rf = float64(ri)
		}
		return floatOp(op, lf, rf)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := rv.(string); ok {
				s := a + b
				return s, r.checkSize(len(s))
			}
			return nil, typeErr("can only concatenate str (not \"%s\") to str", typeName(rv))
		case []any:
			if b, ok := rv.([]any); ok {
				out := make([]any, 0, len(a)+len(b))
				return append(append(out, a...), b...), r.step(int64(len(a) + len(b)))
			}
			return nil, typeErr("can only concatenate list (not \"%s\") to list", typeName(rv))
		case Tuple:
			if b, ok := rv.(Tuple); ok {
				out := make(Tuple, 0, len(a)+len(b))
				return append(append(out, a...), b...), r.step(int64(len(a) + len(b)))
			}
			return nil, typeErr("can only concatenate tuple (not \"%s\") to tuple", typeName(rv))
		}
	case "*":
		seq, n := l, rv
		if _, ok := indexInt(seq); ok {
			seq, n = rv, l
		}
		count, ok := indexInt(n)
		if !ok {
			break
		}
		if count < 0 {
			count = 0
		}
		if n, err := length(seq); err == nil && n == 0 {
			// Repeating nothing is nothing, however large the count.
			count = 0
		}
		switch s := seq.(type) {
		case string:
			if err := r.checkSize(len(s) * int(min(count, int64(r.limits.MaxOutput)+1))); err != nil {
				return nil, err
			}
			if err := r.step(int64(len(s)) * count / 64); err != nil {
				return nil, err
			}
			return strings.Repeat(s, int(count)), nil
		case []any:
			if count > r.limits.MaxSteps {
				return nil, newErr(ErrLimit, "list repetition by %d exceeds the step budget", count)
			}
			total := int64(len(s)) * count
			if err := r.step(total); err != nil {
				return nil, err
			}
			out := make([]any, 0, total)
			for i := int64(0); i < count; i++ {
				out = append(out, s...)
			}
			return out, nil
		case Tuple:
			if count > r.limits.MaxSteps {
				return nil, newErr(ErrLimit, "tuple repetition by %d exceeds the step budget", count)
			}
			total := int64(len(s)) * count
			if err := r.step(total); err != nil {
				return nil, err
			}
			out := make(Tuple, 0, total)
			for i := int64(0); i < count; i++ {
				out = append(out, s...)
			}
			return out, nil
		}
	case "%":
		if s, ok := l.(string); ok {
			out, err := percentFormat(s, rv, r.limits.MaxOutput)
			if err != nil {
				return nil, err
			}
			return out, r.checkSize(len(out))
		}
	}
	return nil, unsupportedOperand(op, l, rv)
}

func intOp(op string, a, b int64) (any, error) {
	switch op {
	case "+":
		s := a + b
		if (s > a) != (b > 0) {
			return nil, overflow()
		}
		return s, nil
	case "-":
		s := a - b
		if (s < a) != (b > 0) {
			return nil, overflow()
		}
		return s, nil
	case "*":
		if a == 0 || b == 0 {
			return int64(0), nil
		}
		hi, lo := bits.Mul64(uint64(absInt(a)), uint64(absInt(b)))
		if hi != 0 || lo > math.MaxInt64 || a == math.MinInt64 || b == math.MinInt64 {
			return nil, overflow()
		}
		if (a < 0) != (b < 0) {
			return -int64(lo), nil
		}
		return int64(lo), nil
	case "/":
		if b == 0 {
			return nil, valueErr("division by zero")
		}
		return float64(a) / float64(b), nil
	case "//":
		if b == 0 {
			return nil, valueErr("integer division or modulo by zero")
		}
		if a == math.MinInt64 && b == -1 {
			return nil, overflow()
		}
		q := a / b
		if (a%b != 0) && ((a < 0) != (b < 0)) {
			q--
		}
		return q, nil
	case "%":
		if b == 0 {
			return nil, valueErr("integer modulo by zero")
		}
		if b == -1 {
			return int64(0), nil
		}
		m := a % b
		if m != 0 && ((m < 0) != (b < 0)) {
			m += b
		}
		return m, nil
	case "**":
		if b < 0 {
			if a == 0 {
				return nil, valueErr("0.0 cannot be raised to a negative power")
			}
			return math.Pow(float64(a), float64(b)), nil
		}
		result := int64(1)
		base := a
		for e := b; e > 0; e >>= 1 {
			if e&1 == 1 {
				v, err := intOp("*", result, base)
				if err != nil {
					return nil, err
				}
				result = v.(int64)
			}
			if e > 1 {
				v, err := intOp("*", base, base)
				if err != nil {
					return nil, err
				}
				base = v.(int64)
			}
		}
		return result, nil
	}
	return nil, typeErr("unsupported operator %s", op)
}

func absInt(a int64) int64 {
	if a < 0 {
		return -a
	}
	return a
}

func floatOp(op string, a, b float64) (any, error) {
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, valueErr("float division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, valueErr("float floor division by zero")
		}
		return math.Floor(a / b), nil
	case "%":
		if b == 0 {
			return nil, valueErr("float modulo")
		}
		m := math.Mod(a, b)
		if m != 0 && ((m < 0) != (b < 0)) {
			m += b
		}
		return m, nil
	case "**":
		if a == 0 && b < 0 {
			return nil, valueErr("0.0 cannot be raised to a negative power")
		}
		return math.Pow(a, b), nil
	}
	return nil, typeErr("unsupported operator %s", op)
}

func unary(op string, v any) (any, error) {
	if op == "not" {
		return !truthy(v), nil
	}
	if u, ok := v.(*undefined); ok {
		return nil, u.fail()
	}
	i, f, isF, ok := asNumber(v)
	if !ok {
		return nil, typeErr("bad operand type for unary %s: '%s'", op, typeName(v))
	}
	if op == "+" {
		if isF {
			return f, nil
		}
		return i, nil
	}
	if isF {
		return -f, nil
	}
	if i == math.MinInt64 {
		return nil, overflow()
	}
	return -i, nil
}

// valuesEqual is Python's ==.
func valuesEqual(a, b any) bool {
	ai, af, aF, aNum := asNumber(a)
	bi, bf, bF, bNum := asNumber(b)
	if aNum && bNum {
		switch {
		case !aF && !bF:
			return ai == bi
		case aF && bF:
			return af == bf
		case aF:
			return af == float64(bi) && (math.Abs(af) < 1<<63 && int64(af) == bi)
		default:
			return bf == float64(ai) && (math.Abs(bf) < 1<<63 && int64(bf) == ai)
		}
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []any:
		y, ok := b.([]any)
		return ok && seqEqual(x, y)
	case Tuple:
		y, ok := b.(Tuple)
		return ok && seqEqual(x, y)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for i, k := range x.keys {
			v, found := y.getAny(k)
			if !found || !valuesEqual(x.vals[i], v) {
				return false
			}
		}
		return true
	case *undefined:
		_, ok := b.(*undefined)
		return ok
	case *rangeValue:
		y, ok := b.(*rangeValue)
		return ok && x.n == y.n && (x.n == 0 || (x.start == y.start && (x.n == 1 || x.step == y.step)))
	}
	return a == b
}

func seqEqual(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !valuesEqual(a[i], b[i]) {
			return false
		}
	}
	return true
}

// compareValues orders a and b as Python's < does, or fails with TypeError.
func compareValues(a, b any) (int, error) {
	if u, ok := a.(*undefined); ok {
		return 0, u.fail()
	}
	if u, ok := b.(*undefined); ok {
		return 0, u.fail()
	}
	ai, af, aF, aNum := asNumber(a)
	bi, bf, bF, bNum := asNumber(b)
	if aNum && bNum {
		if !aF && !bF {
			return cmp3(ai < bi, ai > bi), nil
		}
		if !aF {
			af = float64(ai)
		}
		if !bF {
			bf = float64(bi)
		}
		return cmp3(af < bf, af > bf), nil
	}
	switch x := a.(type) {
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case []any:
		if y, ok := b.([]any); ok {
			return compareSeq(x, y)
		}
	case Tuple:
		if y, ok := b.(Tuple); ok {
			return compareSeq(x, y)
		}
	}
	return 0, typeErr("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func cmp3(less, greater bool) int {
	switch {
	case less:
		return -1
	case greater:
		return 1
	}
	return 0
}

func compareSeq(a, b []any) (int, error) {
	for i := 0; i < len(a) && i < len(b); i++ {
		if valuesEqual(a[i], b[i]) {
			continue
		}
		return compareValues(a[i], b[i])
	}
	return cmp3(len(a) < len(b), len(a) > len(b)), nil
}

func (r *renderer) compare(op string, a, b any) (bool, error) {
	switch op {
	case "==":
		return valuesEqual(a, b), nil
	case "!=":
		return !valuesEqual(a, b), nil
	case "in":
		return r.contains(b, a)
	case "notin":
		ok, err := r.contains(b, a)
		return !ok, err
	}
	c, err := compareValues(a, b)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Kind == ErrType {
			e.Msg = strings.Replace(e.Msg, "'<'", "'"+op+"'", 1)
		}
		return false, err
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

// contains is Python's "item in container".
func (r *renderer) contains(container, item any) (bool, error) {
	switch c := container.(type) {
	case string:
		s, ok := item.(string)
		if !ok {
			return false, typeErr("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(c, s), nil
	case *Dict:
		if _, err := hashKey(item); err != nil {
			return false, err
		}
		_, ok := c.getAny(item)
		return ok, nil
	case *view:
		if c.kind == "dict_keys" {
			for _, k := range c.items {
				if valuesEqual(k, item) {
					return true, nil
				}
			}
			return false, nil
		}
	case *undefined:
		return false, nil
	}
	items, err := r.iterate(container)
	if err != nil {
		return false, typeErr("argument of type '%s' is not iterable", typeName(container))
	}
	for _, e := range items {
		if valuesEqual(e, item) {
			return true, nil
		}
	}
	return false, nil
}

// iterate lists the items Python's iter() would yield.
func (r *renderer) iterate(v any) ([]any, error) {
	var items []any
	switch x := v.(type) {
	case []any:
		items = x
	case Tuple:
		items = x
	case string:
		items = make([]any, 0, len(x))
		for _, c := range x {
			items = append(items, string(c))
		}
	case *Dict:
		items = x.keys
	case *view:
		items = x.items
	case *rangeValue:
		items = x.items()
	case *generator:
		if x.used {
			return nil, nil
		}
		x.used = true
		items = x.items
	case *undefined:
		if x.security {
			return nil, x.fail()
		}
		return nil, nil
	default:
		return nil, typeErr("'%s' object is not iterable", typeName(v))
	}
	return items, r.step(int64(len(items)))
}

// length is Python's len().
func length(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case []any:
		return len(x), nil
	case Tuple:
		return len(x), nil
	case *Dict:
		return x.Len(), nil
	case *view:
		return len(x.items), nil
	case *rangeValue:
		return int(x.n), nil
	case *undefined:
		return 0, nil
	case *namespace:
		return 0, typeErr("object of type 'Namespace' has no len()")
	}
	return 0, typeErr("object of type '%s' has no len()", typeName(v))
}

// sliceIndices resolves Python slice bounds for a sequence of length n.
func sliceIndices(n int, start, stop, step any) (int, int, int, error) {
	st := 1
	if step != nil {
		s, ok := indexInt(step)
		if !ok {
			return 0, 0, 0, typeErr("slice indices must be integers or None or have an __index__ method")
		}
		if s == 0 {
			return 0, 0, 0, valueErr("slice step cannot be zero")
		}
		st = clampInt(s)
	}
	bound := func(v any, dflt int) (int, error) {
		if v == nil {
			return dflt, nil
		}
		i, ok := indexInt(v)
		if !ok {
			return 0, typeErr("slice indices must be integers or None or have an __index__ method")
		}
		x := clampInt(i)
		if x < 0 {
			x += n
			if x < 0 {
				if st < 0 {
					return -1, nil
				}
				return 0, nil
			}
		}
		if x >= n {
			if st < 0 {
				return n - 1, nil
			}
			return n, nil
		}
		return x, nil
	}
	var lo, hi int
	var err error
	if st > 0 {
		if lo, err = bound(start, 0); err != nil {
			return 0, 0, 0, err
		}
		if hi, err = bound(stop, n); err != nil {
			return 0, 0, 0, err
		}
	} else {
		if lo, err = bound(start, n-1); err != nil {
			return 0, 0, 0, err
		}
		if hi, err = bound(stop, -1); err != nil {
			return 0, 0, 0, err
		}
	}
	return lo, hi, st, nil
}

func clampInt(i int64) int {
	const limit = 1 << 40
	if i > limit {
		return limit
	}
	if i < -limit {
		return -limit
	}
	return int(i)
}

func sliceItems(items []any, lo, hi, st int) []any {
	out := []any{}
	if st > 0 {
		for i := lo; i < hi; i += st {
			out = append(out, items[i])
		}
	} else {
		for i := lo; i > hi; i += st {
			out = append(out, items[i])
		}
	}
	return out
}

func sliceValue(obj, start, stop, step any) (any, error) {
	switch x := obj.(type) {
	case []any:
		lo, hi, st, err := sliceIndices(len(x), start, stop, step)
		if err != nil {
			return nil, err
		}
		return sliceItems(x, lo, hi, st), nil
	case Tuple:
		lo, hi, st, err := sliceIndices(len(x), start, stop, step)
		if err != nil {
			return nil, err
		}
		return Tuple(sliceItems(x, lo, hi, st)), nil
	case string:
		runes := []rune(x)
		lo, hi, st, err := sliceIndices(len(runes), start, stop, step)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		if st > 0 {
			for i := lo; i < hi; i += st {
				b.WriteRune(runes[i])
			}
		} else {
			for i := lo; i > hi; i += st {
				b.WriteRune(runes[i])
			}
		}
		return b.String(), nil
	}
	if rg, ok := obj.(*rangeValue); ok {
		lo, hi, st, err := sliceIndices(int(rg.n), start, stop, step)
		if err != nil {
			return nil, err
		}
		out := &rangeValue{start: rg.at(int64(lo)), stop: rg.at(int64(hi)), step: rg.step * int64(st)}
		out.n = rangeLen(out.start, out.stop, out.step)
		return out, nil
	}
	// jinja2 turns the TypeError of an unsliceable object into Undefined.
	return undefAttr(obj, "slice"), nil
}

// unsafeAttr is the sandbox's answer to an attribute it will not expose.
func unsafeAttr(obj any, name string) *undefined {
	return &undefined{msg: "access to attribute '" + name + "' of '" + typeName(obj) + "' object is unsafe.", security: true}
}

// getattr is jinja2's sandboxed environment.getattr: a Python attribute
// first, then the item of the same name, else Undefined.
func (r *renderer) getattr(obj any, name string) (any, error) {
	if u, ok := obj.(*undefined); ok {
		return nil, u.fail()
	}
	if strings.HasPrefix(name, "__") {
		if _, isDict := obj.(*Dict); !isDict {
			return unsafeAttr(obj, name), nil
		}
	}
	if m, ok := r.method(obj, name); ok {
		return m, nil
	}
	switch x := obj.(type) {
	case *Dict:
		if v, ok := x.getAny(name); ok {
			return v, nil
		}
	case *namespace:
		if v, ok := x.attrs.getAny(name); ok {
			return v, nil
		}
	case *loopValue:
		if v, ok := x.attr(name); ok {
			return v, nil
		}
	case int64, bool:
		i, _, _, _ := asNumber(x)
		switch name {
		case "real", "numerator":
			return i, nil
		case "imag":
			return int64(0), nil
		case "denominator":
			return int64(1), nil
		}
	case float64:
		switch name {
		case "real":
			return x, nil
		case "imag":
			return 0.0, nil
		}
	case *macroValue:
		switch name {
		case "name":
			return x.name, nil
		case "arguments":
			out := make(Tuple, len(x.def.params))
			for i, p := range x.def.params {
				out[i] = p.name
			}
			return out, nil
		case "catch_kwargs":
			return x.def.usesKwargs, nil
		case "catch_varargs":
			return x.def.usesVarargs, nil
		case "caller":
			return x.def.usesCaller, nil
		}
	}
	return undefAttr(obj, name), nil
}

// getitem is jinja2's sandboxed environment.getitem: the item first, then an
// attribute when the key is a string, else Undefined.
func (r *renderer) getitem(obj, key any) (any, error) {
	if u, ok := obj.(*undefined); ok {
		return nil, u.fail()
	}
	switch x := obj.(type) {
	case []any:
		if v, ok := indexSeq(x, key); ok {
			return v, nil
		}
	case Tuple:
		if v, ok := indexSeq(x, key); ok {
			return v, nil
		}
	case string:
		if i, ok := indexInt(key); ok {
			runes := []rune(x)
			n := int64(len(runes))
			if i < 0 {
				i += n
			}
			if i >= 0 && i < n {
				return string(runes[i]), nil
			}
		}
	case *Dict:
		if v, ok := x.getAny(key); ok {
			return v, nil
		}
	case *rangeValue:
		if i, ok := indexInt(key); ok {
			if i < 0 {
				i += x.n
			}
			if i >= 0 && i < x.n {
				return x.at(i), nil
			}
		}
	}
	if s, ok := key.(string); ok {
		if _, isDict := obj.(*Dict); isDict || !strings.HasPrefix(s, "__") {
			return r.getattr(obj, s)
		}
		return unsafeAttr(obj, s), nil
	}
	return undefAttr(obj, key), nil
}

func indexSeq(items []any, key any) (any, bool) {
	i, ok := indexInt(key)
	if !ok {
		return nil, false
	}
	n := int64(len(items))
	if i < 0 {
		i += n
	}
	if i < 0 || i >= n {
		return nil, false
	}
	return items[i], true
}
