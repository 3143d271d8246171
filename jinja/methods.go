package jinja

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The Python methods templates call on values. The sandbox is immutable, so
// the mutating list and dict methods resolve to an unsafe Undefined that
// fails with ErrSecurity when called.

var unsafeListMethods = map[string]bool{"append": true, "extend": true, "insert": true, "pop": true, "remove": true, "reverse": true, "sort": true, "clear": true}
var unsafeDictMethods = map[string]bool{"pop": true, "popitem": true, "setdefault": true, "update": true, "clear": true}

type methodFn func(r *renderer, args []any, kw []kwarg) (any, error)

func bound(name string, fn methodFn) *funcValue {
	return &funcValue{name: name, fn: fn}
}

func (r *renderer) method(obj any, name string) (any, bool) {
	switch x := obj.(type) {
	case string:
		if fn, ok := strMethod(x, name); ok {
			return bound(name, fn), true
		}
	case *Dict:
		if unsafeDictMethods[name] {
			return unsafeAttr(obj, name), true
		}
		if fn, ok := dictMethod(x, name); ok {
			return bound(name, fn), true
		}
	case []any:
		if unsafeListMethods[name] {
			return unsafeAttr(obj, name), true
		}
		if fn, ok := seqMethod(x, name, false); ok {
			return bound(name, fn), true
		}
	case Tuple:
		if fn, ok := seqMethod(x, name, true); ok {
			return bound(name, fn), true
		}
	}
	return nil, false
}

// argBinder matches positional and keyword arguments to parameter names.
type argBinder struct {
	fname string
	vals  []any
	set   []bool
}

// bindArgs binds args and kw to names; the first required names must be
// present.
func bindArgs(fname string, args []any, kw []kwarg, required int, names ...string) (*argBinder, error) {
	b := &argBinder{fname: fname, vals: make([]any, len(names)), set: make([]bool, len(names))}
	if len(args) > len(names) {
		return nil, typeErr("%s() takes at most %d arguments (%d given)", fname, len(names), len(args))
	}
	for i, a := range args {
		b.vals[i], b.set[i] = a, true
	}
	for _, k := range kw {
		found := false
		for i, n := range names {
			if n == k.name {
				if b.set[i] {
					return nil, typeErr("%s() got multiple values for argument '%s'", fname, k.name)
				}
				b.vals[i], b.set[i], found = k.val, true, true
			}
		}
		if !found {
			return nil, typeErr("%s() got an unexpected keyword argument '%s'", fname, k.name)
		}
	}
	for i := 0; i < required; i++ {
		if !b.set[i] {
			return nil, typeErr("%s() missing required argument '%s'", fname, names[i])
		}
	}
	return b, nil
}

// get returns argument i, or dflt when it was not passed.
func (b *argBinder) get(i int, dflt any) any {
	if b.set[i] {
		return b.vals[i]
	}
	return dflt
}

func (b *argBinder) str(i int, dflt string) (string, error) {
	v := b.get(i, dflt)
	s, ok := v.(string)
	if !ok {
		return "", typeErr("%s() argument must be str, not %s", b.fname, typeName(v))
	}
	return s, nil
}

// optStr returns an optional string argument where None means absent.
func (b *argBinder) optStr(i int) (string, bool, error) {
	v := b.get(i, nil)
	if v == nil {
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", false, typeErr("%s() argument must be str or None, not %s", b.fname, typeName(v))
	}
	return s, true, nil
}

func (b *argBinder) integer(i int, dflt int64) (int64, error) {
	v := b.get(i, dflt)
	n, ok := indexInt(v)
	if !ok {
		return 0, typeErr("'%s' object cannot be interpreted as an integer", typeName(v))
	}
	return n, nil
}

func stripChars(s, chars string, haveChars, left, right bool) string {
	f := isPySpace
	if haveChars {
		f = func(r rune) bool { return strings.ContainsRune(chars, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s
}

// pySplit is str.split / str.rsplit.
func pySplit(s string, sep string, haveSep bool, maxsplit int64, fromRight bool) ([]any, error) {
	var parts []string
	if !haveSep {
		fields := strings.FieldsFunc(s, isPySpace)
		if maxsplit < 0 || int(maxsplit) >= len(fields)-1 {
			parts = fields
		} else if !fromRight {
			// Split off maxsplit leading words, keep the remainder intact.
			rest := strings.TrimLeftFunc(s, isPySpace)
			for i := int64(0); i < maxsplit; i++ {
				idx := strings.IndexFunc(rest, isPySpace)
				parts = append(parts, rest[:idx])
				rest = strings.TrimLeftFunc(rest[idx:], isPySpace)
			}
			parts = append(parts, rest)
		} else {
			rest := strings.TrimRightFunc(s, isPySpace)
			var tail []string
			for i := int64(0); i < maxsplit; i++ {
				idx := strings.LastIndexFunc(rest, isPySpace)
				tail = append(tail, rest[idx+1:])
				rest = strings.TrimRightFunc(rest[:idx], isPySpace)
			}
			parts = append(parts, rest)
			for i := len(tail) - 1; i >= 0; i-- {
				parts = append(parts, tail[i])
			}
		}
	} else {
		if sep == "" {
			return nil, valueErr("empty separator")
		}
		switch {
		case maxsplit < 0:
			parts = strings.Split(s, sep)
		case !fromRight:
			parts = strings.SplitN(s, sep, int(min(maxsplit, 1<<30))+1)
		default:
			rest := s
			var tail []string
			for i := int64(0); i < maxsplit; i++ {
				idx := strings.LastIndex(rest, sep)
				if idx < 0 {
					break
				}
				tail = append(tail, rest[idx+len(sep):])
				rest = rest[:idx]
			}
			parts = append(parts, rest)
			for i := len(tail) - 1; i >= 0; i-- {
				parts = append(parts, tail[i])
			}
		}
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

// runeRange converts Python start/end arguments to byte offsets in s.
func runeRange(s string, b *argBinder, si, ei int) (int, int, error) {
	n := utf8.RuneCountInString(s)
	lo, hi, _, err := sliceIndices(n, b.get(si, nil), b.get(ei, nil), nil)
	if err != nil {
		return 0, 0, err
	}
	if hi < lo {
		hi = lo
	}
	return runeOffset(s, lo), runeOffset(s, hi), nil
}

func runeOffset(s string, n int) int {
	if n <= 0 {
		return 0
	}
	i := 0
	for off := range s {
		if i == n {
			return off
		}
		i++
	}
	return len(s)
}

// pyUpper is str.upper, including the expanding special cases (ß -> SS,
// ligatures) that unicode.ToUpper cannot express rune by rune.
func pyUpper(s string) string {
	var b strings.Builder
	for _, r := range s {
		if exp, ok := upperSpecial[r]; ok {
			b.WriteString(exp)
		} else {
			b.WriteRune(unicode.ToUpper(r))
		}
	}
	return b.String()
}

var upperSpecial = map[rune]string{
	'ß': "SS", 'ŉ': "ʼN", 'ǰ': "J̌", 'ΐ': "Ϊ́", 'ΰ': "Ϋ́", 'և': "ԵՒ",
	'ﬀ': "FF", 'ﬁ': "FI", 'ﬂ': "FL", 'ﬃ': "FFI", 'ﬄ': "FFL", 'ﬅ': "ST", 'ﬆ': "ST",
}

// pyLower is str.lower, with İ's two-rune lowering and Greek final sigma.
func pyLower(s string) string {
	if !strings.ContainsAny(s, "İΣ") {
		return strings.ToLower(s)
	}
	runes := []rune(s)
	var b strings.Builder
	for i, r := range runes {
		switch {
		case r == 'İ':
			b.WriteString("i̇")
		case r == 'Σ' && i > 0 && unicode.IsLetter(runes[i-1]) && (i+1 == len(runes) || !unicode.IsLetter(runes[i+1])):
			b.WriteRune('ς')
		default:
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		cased := unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
		if cased {
			if prevCased {
				b.WriteRune(unicode.ToLower(r))
			} else {
				b.WriteRune(unicode.ToTitle(r))
			}
		} else {
			b.WriteRune(r)
		}
		prevCased = cased
	}
	return b.String()
}

func pyCapitalize(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	if size == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + pyLower(s[size:])
}

func isCasedPredicate(s string, upper bool) bool {
	cased := false
	for _, r := range s {
		if unicode.IsUpper(r) || unicode.IsTitle(r) {
			if !upper {
				return false
			}
			cased = true
		} else if unicode.IsLower(r) {
			if upper {
				return false
			}
			cased = true
		}
	}
	return cased
}

func allRunes(s string, f func(rune) bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !f(r) {
			return false
		}
	}
	return true
}

// splitLines is str.splitlines: every Unicode line boundary counts.
func splitLines(s string, keepEnds bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		end := -1
		switch r {
		case '\n', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			end = i + size
		case '\r':
			end = i + size
			if end < len(s) && s[end] == '\n' {
				end++
			}
		}
		if end < 0 {
			i += size
			continue
		}
		if keepEnds {
			out = append(out, s[start:end])
		} else {
			out = append(out, s[start:i])
		}
		start, i = end, end
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

func strList(items []string) []any {
	out := make([]any, len(items))
	for i, s := range items {
		out[i] = s
	}
	return out
}

func pad(s string, width int64, fill string, align byte) string {
	n := int64(utf8.RuneCountInString(s))
	if width <= n {
		return s
	}
	total := int(width - n)
	switch align {
	case '<':
		return s + strings.Repeat(fill, total)
	case '>':
		return strings.Repeat(fill, total) + s
	}
	// Python's centering puts the odd space on the left when the total
	// padding is odd and the width is odd... precisely: left = total/2 +
	// (total & width & 1).
	left := total/2 + (total & int(width) & 1)
	return strings.Repeat(fill, left) + s + strings.Repeat(fill, total-left)
}

func strMethod(s, name string) (methodFn, bool) {
	switch name {
	case "strip", "lstrip", "rstrip":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 0, "chars")
			if err != nil {
				return nil, err
			}
			chars, have, err := b.optStr(0)
			if err != nil {
				return nil, err
			}
			return stripChars(s, chars, have, name != "rstrip", name != "lstrip"), nil
		}, true
	case "split", "rsplit":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 0, "sep", "maxsplit")
			if err != nil {
				return nil, err
			}
			sep, have, err := b.optStr(0)
			if err != nil {
				return nil, err
			}
			maxsplit, err := b.integer(1, -1)
			if err != nil {
				return nil, err
			}
			out, err := pySplit(s, sep, have, maxsplit, name == "rsplit")
			if err != nil {
				return nil, err
			}
			return out, r.step(int64(len(out)))
		}, true
	case "splitlines":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 0, "keepends")
			if err != nil {
				return nil, err
			}
			return strList(splitLines(s, truthy(b.get(0, false)))), nil
		}, true
	case "startswith", "endswith":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 1, "prefix", "start", "end")
			if err != nil {
				return nil, err
			}
			lo, hi, err := runeRange(s, b, 1, 2)
			if err != nil {
				return nil, err
			}
			sub := s[lo:hi]
			var cands []any
			switch p := b.get(0, nil).(type) {
			case string:
				cands = []any{p}
			case Tuple:
				cands = p
			default:
				return nil, typeErr("%s first arg must be str or a tuple of str, not %s", name, typeName(p))
			}
			for _, c := range cands {
				cs, ok := c.(string)
				if !ok {
					return nil, typeErr("tuple for %s must only contain str, not %s", name, typeName(c))
				}
				if (name == "startswith" && strings.HasPrefix(sub, cs)) || (name == "endswith" && strings.HasSuffix(sub, cs)) {
					return true, nil
				}
			}
			return false, nil
		}, true
	case "upper", "lower", "title", "capitalize", "swapcase", "casefold",
		"isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum", "isspace", "isupper", "islower", "istitle":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			if _, err := bindArgs(name, args, kw, 0); err != nil {
				return nil, err
			}
			switch name {
			case "upper":
				return pyUpper(s), nil
			case "lower":
				return pyLower(s), nil
			case "casefold":
				return strings.ToLower(strings.ReplaceAll(s, "ß", "ss")), nil
			case "title":
				return pyTitle(s), nil
			case "capitalize":
				return pyCapitalize(s), nil
			case "swapcase":
				return strings.Map(func(r rune) rune {
					if unicode.IsUpper(r) {
						return unicode.ToLower(r)
					}
					return unicode.ToUpper(r)
				}, s), nil
			case "isdigit", "isdecimal", "isnumeric":
				return allRunes(s, unicode.IsDigit), nil
			case "isalpha":
				return allRunes(s, unicode.IsLetter), nil
			case "isalnum":
				return allRunes(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }), nil
			case "isspace":
				return allRunes(s, isPySpace), nil
			case "isupper":
				return isCasedPredicate(s, true), nil
			case "islower":
				return isCasedPredicate(s, false), nil
			case "istitle":
				return s != "" && pyTitle(s) == s && strings.IndexFunc(s, unicode.IsLetter) >= 0, nil
			}
			return nil, nil
		}, true
	case "replace":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 2, "old", "new", "count")
			if err != nil {
				return nil, err
			}
			old, err := b.str(0, "")
			if err != nil {
				return nil, err
			}
			repl, err := b.str(1, "")
			if err != nil {
				return nil, err
			}
			count, err := b.integer(2, -1)
			if err != nil {
				return nil, err
			}
			return r.replace(s, old, repl, count)
		}, true
	case "find", "rfind", "index", "rindex", "count":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 1, "sub", "start", "end")
			if err != nil {
				return nil, err
			}
			sub, err := b.str(0, "")
			if err != nil {
				return nil, err
			}
			lo, hi, err := runeRange(s, b, 1, 2)
			if err != nil {
				return nil, err
			}
			hay := s[lo:hi]
			if name == "count" {
				if sub == "" {
					return int64(utf8.RuneCountInString(hay) + 1), nil
				}
				return int64(strings.Count(hay, sub)), nil
			}
			var idx int
			if name == "find" || name == "index" {
				idx = strings.Index(hay, sub)
			} else {
				idx = strings.LastIndex(hay, sub)
			}
			if idx < 0 {
				if name == "index" || name == "rindex" {
					return nil, valueErr("substring not found")
				}
				return int64(-1), nil
			}
			return int64(utf8.RuneCountInString(s[:lo+idx])), nil
		}, true
	case "join":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 1, "iterable")
			if err != nil {
				return nil, err
			}
			items, err := r.iterate(b.get(0, nil))
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				str, ok := it.(string)
				if !ok {
					return nil, typeErr("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = str
			}
			out := strings.Join(parts, s)
			return out, r.checkSize(len(out))
		}, true
	case "format":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			out, err := strFormat(s, args, kw, r.limits.MaxOutput)
			if err != nil {
				return nil, err
			}
			return out, r.checkSize(len(out))
		}, true
	case "center", "ljust", "rjust":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 1, "width", "fillchar")
			if err != nil {
				return nil, err
			}
			width, err := b.integer(0, 0)
			if err != nil {
				return nil, err
			}
			fill, err := b.str(1, " ")
			if err != nil {
				return nil, err
			}
			if utf8.RuneCountInString(fill) != 1 {
				return nil, typeErr("The fill character must be exactly one character long")
			}
			if err := r.checkSize(int(min(width, 1<<40))); err != nil {
				return nil, err
			}
			return pad(s, width, fill, map[string]byte{"center": '^', "ljust": '<', "rjust": '>'}[name]), nil
		}, true
	case "zfill":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 1, "width")
			if err != nil {
				return nil, err
			}
			width, err := b.integer(0, 0)
			if err != nil {
				return nil, err
			}
			if err := r.checkSize(int(min(width, 1<<40))); err != nil {
				return nil, err
			}
			sign := ""
			body := s
			if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
				sign, body = s[:1], s[1:]
			}
			n := int64(utf8.RuneCountInString(s))
			if width <= n {
				return s, nil
			}
			return sign + strings.Repeat("0", int(width-n)) + body, nil
		}, true
	case "partition", "rpartition":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 1, "sep")
			if err != nil {
				return nil, err
			}
			sep, err := b.str(0, "")
			if err != nil {
				return nil, err
			}
			if sep == "" {
				return nil, valueErr("empty separator")
			}
			var idx int
			if name == "partition" {
				idx = strings.Index(s, sep)
				if idx < 0 {
					return Tuple{s, "", ""}, nil
				}
			} else {
				idx = strings.LastIndex(s, sep)
				if idx < 0 {
					return Tuple{"", "", s}, nil
				}
			}
			return Tuple{s[:idx], sep, s[idx+len(sep):]}, nil
		}, true
	case "removeprefix", "removesuffix":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 1, "affix")
			if err != nil {
				return nil, err
			}
			a, err := b.str(0, "")
			if err != nil {
				return nil, err
			}
			if name == "removeprefix" {
				return strings.TrimPrefix(s, a), nil
			}
			return strings.TrimSuffix(s, a), nil
		}, true
	}
	return nil, false
}

// replace is str.replace with Python's count semantics and an empty old
// string inserting between every character.
func (r *renderer) replace(s, old, repl string, count int64) (any, error) {
	n := -1
	if count >= 0 {
		n = int(min(count, 1<<30))
	}
	var out string
	if old == "" {
		var b strings.Builder
		done := 0
		if n != 0 {
			b.WriteString(repl)
			done++
		}
		for _, c := range s {
			b.WriteRune(c)
			if n < 0 || done < n {
				b.WriteString(repl)
				done++
			}
			if b.Len() > r.limits.MaxOutput {
				break
			}
		}
		out = b.String()
	} else {
		if k := strings.Count(s, old); k > 0 && len(repl) > len(old) {
			if err := r.checkSize(len(s) + k*(len(repl)-len(old))); err != nil {
				return nil, err
			}
		}
		out = strings.Replace(s, old, repl, n)
	}
	return out, r.checkSize(len(out))
}

func dictMethod(d *Dict, name string) (methodFn, bool) {
	switch name {
	case "items", "keys", "values":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			if _, err := bindArgs(name, args, kw, 0); err != nil {
				return nil, err
			}
			if err := r.step(int64(d.Len())); err != nil {
				return nil, err
			}
			return dictView(d, name), nil
		}, true
	case "get":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			if len(kw) > 0 {
				return nil, typeErr("get() takes no keyword arguments")
			}
			b, err := bindArgs(name, args, nil, 1, "key", "default")
			if err != nil {
				return nil, err
			}
			k := b.get(0, nil)
			if _, err := hashKey(k); err != nil {
				return nil, err
			}
			if v, ok := d.getAny(k); ok {
				return v, nil
			}
			return b.get(1, nil), nil
		}, true
	case "copy":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			return d.copyDict(), nil
		}, true
	}
	return nil, false
}

func dictView(d *Dict, kind string) *view {
	out := make([]any, d.Len())
	for i := range d.keys {
		switch kind {
		case "keys":
			out[i] = d.keys[i]
		case "values":
			out[i] = d.vals[i]
		default:
			out[i] = Tuple{d.keys[i], d.vals[i]}
		}
	}
	return &view{kind: "dict_" + kind, items: out}
}

func seqMethod(items []any, name string, isTuple bool) (methodFn, bool) {
	switch name {
	case "index":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 1, "value")
			if err != nil {
				return nil, err
			}
			for i, it := range items {
				if valuesEqual(it, b.get(0, nil)) {
					return int64(i), nil
				}
			}
			kind := "list"
			if isTuple {
				kind = "tuple"
			}
			return nil, valueErr("%s.index(x): x not in %s", kind, kind)
		}, true
	case "count":
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			b, err := bindArgs(name, args, kw, 1, "value")
			if err != nil {
				return nil, err
			}
			n := 0
			for _, it := range items {
				if valuesEqual(it, b.get(0, nil)) {
					n++
				}
			}
			return int64(n), nil
		}, true
	case "copy":
		if isTuple {
			return nil, false
		}
		return func(r *renderer, args []any, kw []kwarg) (any, error) {
			return append([]any{}, items...), nil
		}, true
	}
	return nil, false
}
