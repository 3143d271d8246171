package jinja

import (
	"math"
	"time"
)

type testFunc func(r *renderer, v any, args []any, kw []kwarg) (bool, error)

// tests are jinja2's builtin tests (the "x is name" operators).
var tests map[string]testFunc

// globals are the functions every template sees: jinja2's defaults plus the
// two transformers adds.
var globals map[string]any

func init() {
	tests = map[string]testFunc{
		"defined": func(r *renderer, v any, a []any, k []kwarg) (bool, error) {
			_, u := v.(*undefined)
			return !u, noArgs("defined", a, k)
		},
		"undefined": func(r *renderer, v any, a []any, k []kwarg) (bool, error) {
			_, u := v.(*undefined)
			return u, noArgs("undefined", a, k)
		},
		"none":        typeTest(func(v any) bool { return v == nil }),
		"boolean":     typeTest(func(v any) bool { _, ok := v.(bool); return ok }),
		"true":        typeTest(func(v any) bool { b, ok := v.(bool); return ok && b }),
		"false":       typeTest(func(v any) bool { b, ok := v.(bool); return ok && !b }),
		"integer":     typeTest(func(v any) bool { _, ok := v.(int64); return ok }),
		"float":       typeTest(func(v any) bool { _, ok := v.(float64); return ok }),
		"number":      typeTest(func(v any) bool { _, _, _, ok := asNumber(v); return ok }),
		"string":      typeTest(func(v any) bool { _, ok := v.(string); return ok }),
		"mapping":     typeTest(func(v any) bool { _, ok := v.(*Dict); return ok }),
		"sequence":    typeTest(isSequence),
		"iterable":    typeTest(isIterable),
		"callable":    typeTest(isCallable),
		"escaped":     typeTest(func(v any) bool { return false }),
		"lower":       typeTest(func(v any) bool { s := pyStr(v); return isCasedPredicate(s, false) }),
		"upper":       typeTest(func(v any) bool { s := pyStr(v); return isCasedPredicate(s, true) }),
		"odd":         parityTest(1),
		"even":        parityTest(0),
		"divisibleby": testDivisibleBy,
		"sameas":      testSameAs,
		"in":          testIn,
		"filter":      nameTest(func(n string) bool { _, ok := filters[n]; return ok }),
		"test":        nameTest(func(n string) bool { _, ok := tests[n]; return ok }),
	}
	for _, names := range [][]string{{"eq", "equalto", "=="}, {"ne", "!="}, {"lt", "lessthan", "<"}, {"le", "<="}, {"gt", "greaterthan", ">"}, {"ge", ">="}} {
		op := names[len(names)-1]
		for _, n := range names {
			tests[n] = compareTest(op)
		}
	}

	globals = map[string]any{
		"range":           &funcValue{name: "range", fn: globalRange},
		"dict":            &funcValue{name: "dict", fn: globalDict},
		"namespace":       &funcValue{name: "namespace", fn: globalNamespace},
		"joiner":          &funcValue{name: "joiner", fn: globalJoiner},
		"cycler":          &funcValue{name: "cycler", fn: globalCycler},
		"raise_exception": &funcValue{name: "raise_exception", fn: globalRaise},
		"strftime_now":    &funcValue{name: "strftime_now", fn: globalStrftimeNow},
	}
}

func typeTest(pred func(any) bool) testFunc {
	return func(r *renderer, v any, args []any, kw []kwarg) (bool, error) {
		if err := noArgs("test", args, kw); err != nil {
			return false, err
		}
		return pred(v), nil
	}
}

// parityTest is jinja2's odd/even: value % 2 compared with want.
func parityTest(want int64) testFunc {
	return func(r *renderer, v any, args []any, kw []kwarg) (bool, error) {
		if err := noArgs("test", args, kw); err != nil {
			return false, err
		}
		m, err := r.binary("%", v, int64(2))
		if err != nil {
			return false, err
		}
		return valuesEqual(m, want), nil
	}
}

func nameTest(pred func(string) bool) testFunc {
	return func(r *renderer, v any, args []any, kw []kwarg) (bool, error) {
		s, ok := v.(string)
		return ok && pred(s), noArgs("test", args, kw)
	}
}

func isSequence(v any) bool {
	switch v.(type) {
	case string, []any, Tuple, *Dict, *undefined, *rangeValue:
		return true
	}
	return false
}

func isIterable(v any) bool {
	switch v.(type) {
	case string, []any, Tuple, *Dict, *undefined, *generator, *view, *rangeValue:
		return true
	}
	return false
}

func isCallable(v any) bool {
	switch x := v.(type) {
	case *funcValue, *macroValue:
		return true
	case *loopValue:
		return x.recurse != nil
	}
	return false
}

func testDivisibleBy(r *renderer, v any, args []any, kw []kwarg) (bool, error) {
	b, err := bindArgs("divisibleby", args, kw, 1, "num")
	if err != nil {
		return false, err
	}
	m, err := r.binary("%", v, b.get(0, nil))
	if err != nil {
		return false, err
	}
	return valuesEqual(m, int64(0)), nil
}

func testSameAs(r *renderer, v any, args []any, kw []kwarg) (bool, error) {
	b, err := bindArgs("sameas", args, kw, 1, "other")
	if err != nil {
		return false, err
	}
	o := b.get(0, nil)
	// Python's "is": singletons and small ints are shared objects.
	switch x := v.(type) {
	case nil:
		return o == nil, nil
	case bool:
		y, ok := o.(bool)
		return ok && x == y, nil
	case int64:
		y, ok := o.(int64)
		return ok && x == y && x >= -5 && x <= 256, nil
	case string:
		y, ok := o.(string)
		return ok && x == y, nil
	case *Dict, *namespace, *macroValue, *funcValue, *loopValue, *generator:
		return v == o, nil
	}
	return false, nil
}

func testIn(r *renderer, v any, args []any, kw []kwarg) (bool, error) {
	b, err := bindArgs("in", args, kw, 1, "seq")
	if err != nil {
		return false, err
	}
	return r.contains(b.get(0, nil), v)
}

func compareTest(op string) testFunc {
	return func(r *renderer, v any, args []any, kw []kwarg) (bool, error) {
		b, err := bindArgs(op, args, kw, 1, "other")
		if err != nil {
			return false, err
		}
		return r.compare(op, v, b.get(0, nil))
	}
}

// maxRange is the sandbox's cap on range() lengths.
const maxRange = 100000

func globalRange(r *renderer, args []any, kw []kwarg) (any, error) {
	if len(kw) > 0 {
		return nil, typeErr("range() takes no keyword arguments")
	}
	var nums []int64
	for _, a := range args {
		n, ok := indexInt(a)
		if !ok {
			return nil, typeErr("'%s' object cannot be interpreted as an integer", typeName(a))
		}
		nums = append(nums, n)
	}
	var start, stop, step int64 = 0, 0, 1
	switch len(nums) {
	case 1:
		stop = nums[0]
	case 2:
		start, stop = nums[0], nums[1]
	case 3:
		start, stop, step = nums[0], nums[1], nums[2]
	default:
		return nil, typeErr("range expected at most 3 arguments, got %d", len(nums))
	}
	if step == 0 {
		return nil, valueErr("range() arg 3 must not be zero")
	}
	n := rangeLen(start, stop, step)
	if n > maxRange || n < 0 {
		return nil, valueErr("Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).", maxRange)
	}
	return &rangeValue{start: start, stop: stop, step: step, n: n}, nil
}

// rangeLen is len(range(start, stop, step)), saturating rather than
// overflowing so huge ranges are still rejected.
func rangeLen(start, stop, step int64) int64 {
	var span, st float64
	switch {
	case step > 0 && stop > start:
		span, st = float64(stop)-float64(start), float64(step)
	case step < 0 && stop < start:
		span, st = float64(start)-float64(stop), -float64(step)
	default:
		return 0
	}
	if span/st > 2*maxRange {
		return math.MaxInt64
	}
	d := uint64(stop - start)
	if step < 0 {
		d = uint64(start - stop)
	}
	s := uint64(step)
	if step < 0 {
		s = uint64(-step)
	}
	return int64((d + s - 1) / s)
}

func globalDict(r *renderer, args []any, kw []kwarg) (any, error) {
	d := NewDict()
	if len(args) > 1 {
		return nil, typeErr("dict expected at most 1 argument, got %d", len(args))
	}
	if len(args) == 1 {
		src, ok := args[0].(*Dict)
		if !ok {
			return nil, typeErr("dict() argument must be a mapping")
		}
		d = src.copyDict()
	}
	for _, k := range kw {
		d.Set(k.name, k.val)
	}
	return d, nil
}

func globalNamespace(r *renderer, args []any, kw []kwarg) (any, error) {
	d, err := globalDict(r, args, kw)
	if err != nil {
		return nil, err
	}
	return &namespace{attrs: d.(*Dict)}, nil
}

func globalJoiner(r *renderer, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("joiner", args, kw, 0, "sep")
	if err != nil {
		return nil, err
	}
	sep := b.get(0, ", ")
	used := false
	return &funcValue{name: "joiner", fn: func(r *renderer, args []any, kw []kwarg) (any, error) {
		if !used {
			used = true
			return "", nil
		}
		return sep, nil
	}}, nil
}

// cyclerValue is jinja2's cycler(): next() steps through the items, current
// reads the present one.
func globalCycler(r *renderer, args []any, kw []kwarg) (any, error) {
	if len(args) == 0 {
		return nil, newErr(ErrRuntime, "at least one item has to be provided")
	}
	ns := &namespace{attrs: NewDict()}
	pos := 0
	sync := func() { ns.attrs.Set("current", args[pos]) }
	sync()
	ns.attrs.Set("next", &funcValue{name: "next", fn: func(r *renderer, a []any, k []kwarg) (any, error) {
		v := args[pos]
		pos = (pos + 1) % len(args)
		sync()
		return v, nil
	}})
	ns.attrs.Set("reset", &funcValue{name: "reset", fn: func(r *renderer, a []any, k []kwarg) (any, error) {
		pos = 0
		sync()
		return nil, nil
	}})
	return ns, nil
}

func globalRaise(r *renderer, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("raise_exception", args, kw, 1, "message")
	if err != nil {
		return nil, err
	}
	return nil, newErr(ErrRaised, "%s", r.str(b.get(0, nil)))
}

func globalStrftimeNow(r *renderer, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("strftime_now", args, kw, 1, "format")
	if err != nil {
		return nil, err
	}
	f, err := b.str(0, "")
	if err != nil {
		return nil, err
	}
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	return strftime(f, now()), nil
}
