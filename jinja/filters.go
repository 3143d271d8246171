package jinja

import (
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type filterFunc func(r *renderer, v any, args []any, kw []kwarg) (any, error)

// filters are jinja2's builtin filters as chat templates use them, with
// transformers' tojson in place of jinja2's own.
var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"abs":        filterAbs,
		"attr":       filterAttr,
		"batch":      filterBatch,
		"capitalize": strFilter(pyCapitalize),
		"center":     filterCenter,
		"count":      filterLength,
		"d":          filterDefault,
		"default":    filterDefault,
		"dictsort":   filterDictsort,
		"e":          filterEscape,
		"escape":     filterEscape,
		"first":      filterFirst,
		"float":      filterFloat,
		"format":     filterFormat,
		"indent":     filterIndent,
		"int":        filterInt,
		"items":      filterItems,
		"join":       filterJoin,
		"last":       filterLast,
		"length":     filterLength,
		"list":       filterList,
		"lower":      strFilter(pyLower),
		"map":        filterMap,
		"max":        minMax(false),
		"min":        minMax(true),
		"reject":     selectFilter(false, false),
		"rejectattr": selectFilter(false, true),
		"replace":    filterReplace,
		"reverse":    filterReverse,
		"round":      filterRound,
		"safe":       filterSafe,
		"select":     selectFilter(true, false),
		"selectattr": selectFilter(true, true),
		"sort":       filterSort,
		"string":     filterString,
		"sum":        filterSum,
		"title":      strFilter(jinjaTitle),
		"tojson":     filterToJSON,
		"trim":       filterTrim,
		"truncate":   filterTruncate,
		"unique":     filterUnique,
		"upper":      strFilter(pyUpper),
		"wordcount":  filterWordcount,
	}
}

func noArgs(name string, args []any, kw []kwarg) error {
	_, err := bindArgs(name, args, kw, 0)
	return err
}

func strFilter(f func(string) string) filterFunc {
	return func(r *renderer, v any, args []any, kw []kwarg) (any, error) {
		if err := noArgs("filter", args, kw); err != nil {
			return nil, err
		}
		return f(r.str(v)), nil
	}
}

var titleSplit = regexp.MustCompile(`[-\s({\[<]+`)

// jinjaTitle is jinja2's title filter: it capitalises after dashes,
// whitespace and opening brackets, unlike str.title.
func jinjaTitle(s string) string {
	var b strings.Builder
	last := 0
	word := func(w string) {
		if w == "" {
			return
		}
		r, size := utf8.DecodeRuneInString(w)
		b.WriteString(pyUpper(string(r)))
		b.WriteString(pyLower(w[size:]))
	}
	for _, m := range titleSplit.FindAllStringIndex(s, -1) {
		word(s[last:m[0]])
		b.WriteString(s[m[0]:m[1]])
		last = m[1]
	}
	word(s[last:])
	return b.String()
}

func filterAbs(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("abs", args, kw); err != nil {
		return nil, err
	}
	i, f, isF, ok := asNumber(v)
	if !ok {
		return nil, typeErr("bad operand type for abs(): '%s'", typeName(v))
	}
	if isF {
		return math.Abs(f), nil
	}
	if i == math.MinInt64 {
		return nil, overflow()
	}
	return absInt(i), nil
}

func filterAttr(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("attr", args, kw, 1, "name")
	if err != nil {
		return nil, err
	}
	name, err := b.str(0, "")
	if err != nil {
		return nil, err
	}
	if u, ok := v.(*undefined); ok {
		return nil, u.fail()
	}
	// attr reads a Python attribute only; dict keys are not attributes.
	switch v.(type) {
	case *Dict, []any, Tuple, string:
		if m, ok := r.method(v, name); ok {
			return m, nil
		}
		return undefAttr(v, name), nil
	}
	return r.getattr(v, name)
}

func filterBatch(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("batch", args, kw, 1, "linecount", "fill_with")
	if err != nil {
		return nil, err
	}
	n, err := b.integer(0, 1)
	if err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, valueErr("batch size must be positive")
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	var out []any
	for i := 0; i < len(items); i += int(n) {
		end := min(i+int(n), len(items))
		chunk := append([]any{}, items[i:end]...)
		if end-i < int(n) && b.set[1] {
			for len(chunk) < int(n) {
				chunk = append(chunk, b.vals[1])
			}
		}
		out = append(out, chunk)
	}
	return &generator{kind: "generator", items: out}, nil
}

func filterCenter(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("center", args, kw, 0, "width")
	if err != nil {
		return nil, err
	}
	w, err := b.integer(0, 80)
	if err != nil {
		return nil, err
	}
	if err := r.checkSize(int(min(w, 1<<40))); err != nil {
		return nil, err
	}
	return pad(r.str(v), w, " ", '^'), nil
}

func filterLength(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("length", args, kw); err != nil {
		return nil, err
	}
	n, err := length(v)
	return int64(n), err
}

func filterDefault(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("default", args, kw, 0, "default_value", "boolean")
	if err != nil {
		return nil, err
	}
	if _, ok := v.(*undefined); ok || (truthy(b.get(1, false)) && !truthy(v)) {
		return b.get(0, ""), nil
	}
	return v, nil
}

// ignoreCase lowers strings for the case-insensitive sorting filters.
func ignoreCase(v any) any {
	if s, ok := v.(string); ok {
		return pyLower(s)
	}
	return v
}

// sortValues sorts stably by key, failing like Python on incomparable keys.
func sortValues(items []any, keys []any, reverse bool) ([]any, error) {
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var firstErr error
	less := func(a, b int) bool {
		c, err := compareValues(keys[a], keys[b])
		if err != nil && firstErr == nil {
			firstErr = err
		}
		return c < 0
	}
	if reverse {
		// Python's reverse=True keeps equal elements in original order.
		sort.SliceStable(idx, func(i, j int) bool { return less(idx[j], idx[i]) })
	} else {
		sort.SliceStable(idx, func(i, j int) bool { return less(idx[i], idx[j]) })
	}
	if firstErr != nil {
		return nil, firstErr
	}
	out := make([]any, len(items))
	for i, k := range idx {
		out[i] = items[k]
	}
	return out, nil
}

func filterDictsort(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("dictsort", args, kw, 0, "case_sensitive", "by", "reverse")
	if err != nil {
		return nil, err
	}
	d, ok := v.(*Dict)
	if !ok {
		return nil, newErr(ErrRuntime, "dictsort expects a mapping, got %s", typeName(v))
	}
	by, err := b.str(1, "key")
	if err != nil {
		return nil, err
	}
	pos := 0
	switch by {
	case "key":
	case "value":
		pos = 1
	default:
		return nil, newErr(ErrRuntime, "You can only sort by either \"key\" or \"value\"")
	}
	items := dictView(d, "items").items
	keys := make([]any, len(items))
	for i, it := range items {
		keys[i] = it.(Tuple)[pos]
		if !truthy(b.get(0, false)) {
			keys[i] = ignoreCase(keys[i])
		}
	}
	if err := r.step(int64(len(items))); err != nil {
		return nil, err
	}
	return sortValues(items, keys, truthy(b.get(2, false)))
}

var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")

func filterEscape(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("escape", args, kw); err != nil {
		return nil, err
	}
	return htmlEscaper.Replace(r.str(v)), nil
}

func filterFirst(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("first", args, kw); err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefMsg("No first item, sequence was empty."), nil
	}
	return items[0], nil
}

func filterLast(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("last", args, kw); err != nil {
		return nil, err
	}
	switch v.(type) {
	case *generator:
		return nil, typeErr("'generator' object is not reversible")
	case nil, int64, float64, bool:
		return nil, typeErr("'%s' object is not reversible", typeName(v))
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return undefMsg("No last item, sequence was empty."), nil
	}
	return items[len(items)-1], nil
}

// parsePyInt parses a string the way Python's int(s, base) does.
func parsePyInt(s string, base int64) (int64, bool) {
	s = strings.TrimFunc(s, isPySpace)
	neg := false
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		neg = s[0] == '-'
		s = s[1:]
	}
	if base == 0 || base == 16 || base == 8 || base == 2 {
		low := strings.ToLower(s)
		for p, b := range map[string]int64{"0x": 16, "0o": 8, "0b": 2} {
			if strings.HasPrefix(low, p) && (base == 0 || base == b) {
				s, base = s[2:], b
				break
			}
		}
		if base == 0 {
			base = 10
		}
	}
	if s == "" || strings.HasPrefix(s, "_") || strings.HasSuffix(s, "_") || strings.Contains(s, "__") {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), int(base), 64)
	if err != nil {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// parsePyFloat parses a string the way Python's float(s) does.
func parsePyFloat(s string) (float64, bool) {
	s = strings.TrimFunc(s, isPySpace)
	low := strings.ToLower(strings.TrimLeft(s, "+-"))
	switch low {
	case "inf", "infinity", "nan":
	default:
		if low == "" || strings.ContainsAny(low, "xp") || strings.HasPrefix(low, "_") || strings.Contains(low, "__") {
			return 0, false
		}
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return f, true
		}
		return 0, false
	}
	return f, true
}

func filterInt(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("int", args, kw, 0, "default", "base")
	if err != nil {
		return nil, err
	}
	dflt := b.get(0, int64(0))
	base, err := b.integer(1, 10)
	if err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		if n, ok := parsePyInt(s, base); ok {
			return n, nil
		}
		if f, ok := parsePyFloat(s); ok {
			if math.IsInf(f, 0) {
				return nil, newErr(ErrValue, "cannot convert float infinity to integer")
			}
			if math.IsNaN(f) {
				return dflt, nil
			}
			return toInt(f)
		}
		return dflt, nil
	}
	if f, ok := v.(float64); ok && math.IsNaN(f) {
		return dflt, nil
	}
	if _, _, _, ok := asNumber(v); ok {
		return toInt(v)
	}
	return dflt, nil
}

func filterFloat(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("float", args, kw, 0, "default")
	if err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		if f, ok := parsePyFloat(s); ok {
			return f, nil
		}
		return b.get(0, 0.0), nil
	}
	if f, ok := toFloat(v); ok {
		return f, nil
	}
	return b.get(0, 0.0), nil
}

func filterFormat(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if len(args) > 0 && len(kw) > 0 {
		return nil, newErr(ErrRuntime, "can't handle positional and keyword arguments at the same time")
	}
	var arg any = Tuple(args)
	if len(kw) > 0 {
		d := NewDict()
		for _, k := range kw {
			d.Set(k.name, k.val)
		}
		arg = d
	}
	out, err := percentFormat(r.str(v), arg, r.limits.MaxOutput)
	if err != nil {
		return nil, err
	}
	return out, r.checkSize(len(out))
}

func filterIndent(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("indent", args, kw, 0, "width", "first", "blank")
	if err != nil {
		return nil, err
	}
	var ind string
	switch w := b.get(0, int64(4)).(type) {
	case string:
		ind = w
	default:
		n, ok := indexInt(w)
		if !ok {
			return nil, typeErr("can't multiply sequence by non-int of type '%s'", typeName(w))
		}
		if err := r.checkSize(int(min(n, 1<<40))); err != nil {
			return nil, err
		}
		ind = strings.Repeat(" ", int(max(n, 0)))
	}
	s := r.str(v) + "\n"
	lines := splitLines(s, false)
	if err := r.checkSize(len(s) + len(lines)*len(ind)); err != nil {
		return nil, err
	}
	var out string
	if truthy(b.get(2, false)) {
		out = strings.Join(lines, "\n"+ind)
	} else {
		var sb strings.Builder
		sb.WriteString(lines[0])
		for _, l := range lines[1:] {
			sb.WriteString("\n")
			if l != "" {
				sb.WriteString(ind)
			}
			sb.WriteString(l)
		}
		out = sb.String()
	}
	if truthy(b.get(1, false)) {
		out = ind + out
	}
	return out, r.checkSize(len(out))
}

func filterItems(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("items", args, kw); err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case *undefined:
		return &generator{kind: "generator"}, nil
	case *Dict:
		return &generator{kind: "generator", items: dictView(x, "items").items}, nil
	}
	return nil, typeErr("Can only get item pairs from a mapping.")
}

func filterJoin(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("join", args, kw, 0, "d", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	if b.get(1, nil) != nil {
		get, err := r.attrGetter(b.get(1, nil), nil, false, false)
		if err != nil {
			return nil, err
		}
		mapped := make([]any, len(items))
		for i, it := range items {
			if mapped[i], err = get(it); err != nil {
				return nil, err
			}
		}
		items = mapped
	}
	parts := make([]string, len(items))
	total := 0
	for i, it := range items {
		parts[i] = r.str(it)
		total += len(parts[i])
	}
	sep := r.str(b.get(0, ""))
	if err := r.checkSize(total + len(sep)*len(parts)); err != nil {
		return nil, err
	}
	return strings.Join(parts, sep), nil
}

func filterList(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("list", args, kw); err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	return append([]any{}, items...), nil
}

// attrGetter resolves jinja2's attribute= arguments: dotted paths whose
// integer parts index, with an optional default for Undefined results.
func (r *renderer) attrGetter(attr any, dflt any, hasDefault bool, lower bool) (func(any) (any, error), error) {
	var parts []any
	switch a := attr.(type) {
	case string:
		for _, p := range strings.Split(a, ".") {
			if n, err := strconv.ParseInt(p, 10, 64); err == nil && allRunes(p, func(c rune) bool { return c >= '0' && c <= '9' }) {
				parts = append(parts, n)
			} else {
				parts = append(parts, p)
			}
		}
	default:
		parts = []any{a}
	}
	return func(item any) (any, error) {
		v := item
		for _, p := range parts {
			var err error
			if v, err = r.getitem(v, p); err != nil {
				return nil, err
			}
		}
		if _, ok := v.(*undefined); ok && hasDefault {
			v = dflt
		}
		if lower {
			v = ignoreCase(v)
		}
		return v, nil
	}, nil
}

func filterMap(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	var fn func(any) (any, error)
	if len(args) == 0 && hasKw(kw, "attribute") {
		var attr, dflt any
		hasDflt := false
		for _, k := range kw {
			switch k.name {
			case "attribute":
				attr = k.val
			case "default":
				dflt, hasDflt = k.val, true
			default:
				return nil, newErr(ErrRuntime, "Unexpected keyword argument '%s'", k.name)
			}
		}
		if fn, err = r.attrGetter(attr, dflt, hasDflt, false); err != nil {
			return nil, err
		}
	} else {
		if len(args) == 0 {
			return nil, newErr(ErrRuntime, "map requires a filter argument")
		}
		name, ok := args[0].(string)
		if !ok {
			return nil, newErr(ErrRuntime, "map requires a filter name")
		}
		rest := args[1:]
		fn = func(item any) (any, error) { return r.applyFilter(name, item, rest, kw) }
	}
	out := make([]any, len(items))
	for i, it := range items {
		if out[i], err = fn(it); err != nil {
			return nil, err
		}
	}
	return &generator{kind: "generator", items: out}, nil
}

func hasKw(kw []kwarg, name string) bool {
	for _, k := range kw {
		if k.name == name {
			return true
		}
	}
	return false
}

func minMax(isMin bool) filterFunc {
	return func(r *renderer, v any, args []any, kw []kwarg) (any, error) {
		b, err := bindArgs("min", args, kw, 0, "case_sensitive", "attribute")
		if err != nil {
			return nil, err
		}
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefMsg("No aggregated item, sequence was empty."), nil
		}
		get, err := r.attrGetter(b.get(1, nil), nil, false, !truthy(b.get(0, false)))
		if err != nil {
			return nil, err
		}
		if b.get(1, nil) == nil {
			get = func(x any) (any, error) {
				if !truthy(b.get(0, false)) {
					return ignoreCase(x), nil
				}
				return x, nil
			}
		}
		best := items[0]
		bestKey, err := get(best)
		if err != nil {
			return nil, err
		}
		for _, it := range items[1:] {
			k, err := get(it)
			if err != nil {
				return nil, err
			}
			c, err := compareValues(k, bestKey)
			if err != nil {
				return nil, err
			}
			if (isMin && c < 0) || (!isMin && c > 0) {
				best, bestKey = it, k
			}
		}
		return best, nil
	}
}

// selectFilter builds select/reject (by test) and selectattr/rejectattr
// (by test on an attribute).
func selectFilter(keep, byAttr bool) filterFunc {
	return func(r *renderer, v any, args []any, kw []kwarg) (any, error) {
		items, err := r.iterate(v)
		if err != nil {
			return nil, err
		}
		get := func(x any) (any, error) { return x, nil }
		if byAttr {
			if len(args) == 0 {
				return nil, newErr(ErrRuntime, "Missing parameter for attribute name")
			}
			if get, err = r.attrGetter(args[0], nil, false, false); err != nil {
				return nil, err
			}
			args = args[1:]
		}
		test := func(x any) (bool, error) { return truthy(x), nil }
		if len(args) > 0 {
			name, ok := args[0].(string)
			if !ok {
				return nil, newErr(ErrRuntime, "test name must be a string")
			}
			rest := args[1:]
			test = func(x any) (bool, error) { return r.runTest(name, x, rest, kw) }
		}
		var out []any
		for _, it := range items {
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			ok, err := test(x)
			if err != nil {
				return nil, err
			}
			if ok == keep {
				out = append(out, it)
			}
		}
		return &generator{kind: "generator", items: out}, nil
	}
}

func filterReplace(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("replace", args, kw, 2, "old", "new", "count")
	if err != nil {
		return nil, err
	}
	count := int64(-1)
	if c := b.get(2, nil); c != nil {
		var ok bool
		if count, ok = indexInt(c); !ok {
			return nil, typeErr("'%s' object cannot be interpreted as an integer", typeName(c))
		}
	}
	return r.replace(r.str(v), r.str(b.get(0, nil)), r.str(b.get(1, nil)), count)
}

func filterReverse(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("reverse", args, kw); err != nil {
		return nil, err
	}
	if s, ok := v.(string); ok {
		runes := []rune(s)
		for i, j := 0, len(runes)-1; i < j; i, j = i+1, j-1 {
			runes[i], runes[j] = runes[j], runes[i]
		}
		return string(runes), nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, newErr(ErrRuntime, "argument must be iterable")
	}
	out := make([]any, len(items))
	for i, it := range items {
		out[len(items)-1-i] = it
	}
	kind := "list_reverseiterator"
	switch v.(type) {
	case *generator:
		// reversed() fails on a generator; jinja2 then materialises a list.
		return out, nil
	case *Dict:
		kind = "dict_reversekeyiterator"
	}
	return &generator{kind: kind, items: out}, nil
}

// roundHalfEven rounds f to ndigits decimals exactly as Python's round: on
// the exact binary value, ties to even.
func roundHalfEven(f float64, ndigits int64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return f
	}
	if ndigits > 22 {
		return f
	}
	if ndigits < -308 {
		return 0 * f
	}
	if ndigits >= 0 {
		// 'f' with a precision rounds the exact decimal expansion to
		// nearest, ties to even, which is what Python does.
		out, _ := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(ndigits), 64), 64)
		return out
	}
	p := math.Pow(10, float64(-ndigits))
	return math.RoundToEven(f/p) * p
}

func filterRound(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("round", args, kw, 0, "precision", "method")
	if err != nil {
		return nil, err
	}
	prec, err := b.integer(0, 0)
	if err != nil {
		return nil, err
	}
	method, err := b.str(1, "common")
	if err != nil {
		return nil, err
	}
	if method != "common" && method != "ceil" && method != "floor" {
		return nil, newErr(ErrRuntime, "method must be common, ceil or floor")
	}
	i, f, isF, ok := asNumber(v)
	if !ok {
		return nil, typeErr("type %s doesn't define __round__ method", typeName(v))
	}
	if method == "common" {
		if !isF {
			if prec >= 0 {
				return i, nil
			}
			return int64(roundHalfEven(float64(i), prec)), nil
		}
		return roundHalfEven(f, prec), nil
	}
	if !isF {
		f = float64(i)
	}
	p := math.Pow(10, float64(prec))
	if method == "ceil" {
		return math.Ceil(f*p) / p, nil
	}
	return math.Floor(f*p) / p, nil
}

func filterSafe(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("safe", args, kw); err != nil {
		return nil, err
	}
	if _, ok := v.(string); ok {
		return v, nil
	}
	return r.str(v), nil
}

func filterSort(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("sort", args, kw, 0, "reverse", "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	lower := !truthy(b.get(1, false))
	keys := make([]any, len(items))
	if attr := b.get(2, nil); attr != nil {
		// A comma-separated attribute sorts by several keys.
		var getters []func(any) (any, error)
		names := []any{attr}
		if s, ok := attr.(string); ok {
			names = nil
			for _, part := range strings.Split(s, ",") {
				names = append(names, strings.TrimSpace(part))
			}
		}
		for _, n := range names {
			g, err := r.attrGetter(n, nil, false, lower)
			if err != nil {
				return nil, err
			}
			getters = append(getters, g)
		}
		for i, it := range items {
			if len(getters) == 1 {
				if keys[i], err = getters[0](it); err != nil {
					return nil, err
				}
				continue
			}
			k := make([]any, len(getters))
			for j, g := range getters {
				if k[j], err = g(it); err != nil {
					return nil, err
				}
			}
			keys[i] = k
		}
	} else {
		for i, it := range items {
			keys[i] = it
			if lower {
				keys[i] = ignoreCase(it)
			}
		}
	}
	if err := r.step(int64(len(items))); err != nil {
		return nil, err
	}
	return sortValues(items, keys, truthy(b.get(0, false)))
}

func filterString(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("string", args, kw); err != nil {
		return nil, err
	}
	return r.str(v), nil
}

func filterSum(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("sum", args, kw, 0, "attribute", "start")
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	get := func(x any) (any, error) { return x, nil }
	if attr := b.get(0, nil); attr != nil {
		if get, err = r.attrGetter(attr, nil, false, false); err != nil {
			return nil, err
		}
	}
	total := b.get(1, int64(0))
	if _, ok := total.(string); ok {
		return nil, typeErr("sum() can't sum strings [use ''.join(seq) instead]")
	}
	for _, it := range items {
		x, err := get(it)
		if err != nil {
			return nil, err
		}
		if total, err = r.binary("+", total, x); err != nil {
			return nil, err
		}
	}
	return total, nil
}

func filterToJSON(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("tojson", args, kw, 0, "ensure_ascii", "indent", "separators", "sort_keys")
	if err != nil {
		return nil, err
	}
	o := jsonOptions{ensureASCII: truthy(b.get(0, false)), sortKeys: truthy(b.get(3, false)), limit: r.limits.MaxOutput}
	switch ind := b.get(1, nil).(type) {
	case nil:
	case string:
		o.indent = &ind
	default:
		n, ok := indexInt(ind)
		if !ok {
			return nil, typeErr("indent must be an int or a string, not %s", typeName(ind))
		}
		if err := r.checkSize(int(min(n, 1<<40))); err != nil {
			return nil, err
		}
		s := strings.Repeat(" ", int(max(n, 0)))
		o.indent = &s
	}
	o.itemSep, o.keySep = ", ", ": "
	if o.indent != nil {
		o.itemSep = ","
	}
	if seps := b.get(2, nil); seps != nil {
		items, err := r.iterate(seps)
		if err != nil || len(items) != 2 {
			return nil, valueErr("separators must be a pair of strings")
		}
		a, ok1 := items[0].(string)
		c, ok2 := items[1].(string)
		if !ok1 || !ok2 {
			return nil, typeErr("separators must be strings")
		}
		o.itemSep, o.keySep = a, c
	}
	out, err := jsonDumps(v, o)
	if err != nil {
		return nil, err
	}
	return out, r.checkSize(len(out))
}

func filterTrim(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("trim", args, kw, 0, "chars")
	if err != nil {
		return nil, err
	}
	chars, have, err := b.optStr(0)
	if err != nil {
		return nil, err
	}
	return stripChars(r.str(v), chars, have, true, true), nil
}

func filterTruncate(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("truncate", args, kw, 0, "length", "killwords", "end", "leeway")
	if err != nil {
		return nil, err
	}
	n, err := b.integer(0, 255)
	if err != nil {
		return nil, err
	}
	end, err := b.str(2, "...")
	if err != nil {
		return nil, err
	}
	leeway, err := b.integer(3, 5)
	if err != nil {
		return nil, err
	}
	endLen := int64(utf8.RuneCountInString(end))
	if n < endLen {
		return nil, newErr(ErrRuntime, "expected length >= %d, got %d", endLen, n)
	}
	if leeway < 0 {
		return nil, newErr(ErrRuntime, "expected leeway >= 0, got %d", leeway)
	}
	runes := []rune(r.str(v))
	if int64(len(runes)) <= n+leeway {
		return string(runes), nil
	}
	head := string(runes[:n-endLen])
	if truthy(b.get(1, false)) {
		return head + end, nil
	}
	if i := strings.LastIndex(head, " "); i >= 0 {
		head = head[:i]
	}
	return head + end, nil
}

func filterUnique(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	b, err := bindArgs("unique", args, kw, 0, "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(v)
	if err != nil {
		return nil, err
	}
	lower := !truthy(b.get(0, false))
	get := func(x any) (any, error) {
		if lower {
			return ignoreCase(x), nil
		}
		return x, nil
	}
	if attr := b.get(1, nil); attr != nil {
		if get, err = r.attrGetter(attr, nil, false, lower); err != nil {
			return nil, err
		}
	}
	seen := map[string]bool{}
	var out []any
	for _, it := range items {
		k, err := get(it)
		if err != nil {
			return nil, err
		}
		h, err := hashKey(k)
		if err != nil {
			return nil, err
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, it)
		}
	}
	return &generator{kind: "generator", items: out}, nil
}

func filterWordcount(r *renderer, v any, args []any, kw []kwarg) (any, error) {
	if err := noArgs("wordcount", args, kw); err != nil {
		return nil, err
	}
	n := 0
	in := false
	for _, c := range r.str(v) {
		w := c == '_' || unicode.IsLetter(c) || unicode.IsNumber(c)
		if w && !in {
			n++
		}
		in = w
	}
	return int64(n), nil
}
