package jinja

import (
	"fmt"
	"strings"
	"time"
)

// Limits bounds the work one Render may do. Zero fields take the
// DefaultLimits value.
type Limits struct {
	// MaxSteps caps evaluated nodes plus loop iterations and items touched
	// by filters: the render's total work.
	MaxSteps int64
	// MaxDepth caps nested macro calls and recursive loops (Python's own
	// recursion limit plays this role in jinja2).
	MaxDepth int
	// MaxOutput caps the length in bytes of the output and of any string
	// built along the way.
	MaxOutput int
}

// DefaultLimits are generous for real chat templates, which take a few
// thousand steps, while keeping a hostile template to well under a second.
var DefaultLimits = Limits{MaxSteps: 5_000_000, MaxDepth: 200, MaxOutput: 32 << 20}

func (l Limits) withDefaults() Limits {
	if l.MaxSteps <= 0 {
		l.MaxSteps = DefaultLimits.MaxSteps
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultLimits.MaxDepth
	}
	if l.MaxOutput <= 0 {
		l.MaxOutput = DefaultLimits.MaxOutput
	}
	return l
}

// Template is a parsed template; it is immutable and safe for concurrent use.
type Template struct {
	body   []stmt
	decl   []string // root names pre-bound to Undefined (see scope.go)
	limits Limits
}

// Parse parses a Jinja template as jinja2 would with trim_blocks and
// lstrip_blocks enabled.
func Parse(src string) (*Template, error) {
	body, err := parse(src)
	if err != nil {
		return nil, err
	}
	return &Template{body: body, decl: analyzeFrames(body), limits: DefaultLimits}, nil
}

// WithLimits returns a copy of t that renders under l.
func (t *Template) WithLimits(l Limits) *Template {
	c := *t
	c.limits = l.withDefaults()
	return &c
}

// Render renders the template with vars as its context. strftime_now reads
// the wall clock.
func (t *Template) Render(vars map[string]any) (string, error) {
	return t.RenderWithClock(vars, time.Now)
}

// RenderWithClock is Render with the clock strftime_now reads.
func (t *Template) RenderWithClock(vars map[string]any, now func() time.Time) (string, error) {
	r := &renderer{limits: t.limits, ctx: make(map[string]any, len(vars)), now: now}
	if r.now == nil {
		r.now = time.Now
	}
	for k, v := range vars {
		c, err := fromGo(v)
		if err != nil {
			return "", fmt.Errorf("jinja: variable %q: %w", k, err)
		}
		r.ctx[k] = c
	}
	var out strings.Builder
	r.out = &out
	root := &scope{vars: map[string]any{}}
	predeclare(root, t.decl)
	if _, err := r.exec(t.body, root); err != nil {
		return "", err
	}
	return out.String(), nil
}

type scope struct {
	vars   map[string]any
	parent *scope
}

func newScope(parent *scope) *scope { return &scope{vars: map[string]any{}, parent: parent} }

func (s *scope) lookup(name string) (any, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

type renderer struct {
	limits Limits
	ctx    map[string]any
	now    func() time.Time
	out    *strings.Builder
	steps  int64
	depth  int
}

// step charges n units of work against the budget.
func (r *renderer) step(n int64) error {
	r.steps += n
	if r.steps > r.limits.MaxSteps {
		return newErr(ErrLimit, "render exceeded %d steps", r.limits.MaxSteps)
	}
	return nil
}

// checkSize rejects strings and outputs larger than the output limit.
func (r *renderer) checkSize(n int) error {
	if n > r.limits.MaxOutput {
		return newErr(ErrLimit, "string of %d bytes exceeds the %d-byte limit", n, r.limits.MaxOutput)
	}
	return nil
}

// str is Python's str(v) capped just past the output limit.
func (r *renderer) str(v any) string { return strLimit(v, r.limits.MaxOutput+1) }

func (r *renderer) write(s string) error {
	if err := r.checkSize(r.out.Len() + len(s)); err != nil {
		return err
	}
	r.out.WriteString(s)
	return nil
}

// capture renders body into a fresh buffer and returns the text.
func (r *renderer) capture(body []stmt, sc *scope) (string, ctrl, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	c, err := r.exec(body, sc)
	r.out = saved
	return b.String(), c, err
}

func (r *renderer) enter() error {
	r.depth++
	if r.depth > r.limits.MaxDepth {
		return newErr(ErrLimit, "maximum recursion depth %d exceeded", r.limits.MaxDepth)
	}
	return nil
}

func (r *renderer) leave() { r.depth-- }

type ctrl int

const (
	ctrlNone ctrl = iota
	ctrlBreak
	ctrlContinue
)

func (r *renderer) exec(body []stmt, sc *scope) (ctrl, error) {
	for _, s := range body {
		if err := r.step(1); err != nil {
			return ctrlNone, at(err, s.position())
		}
		c, err := r.execOne(s, sc)
		if err != nil {
			return ctrlNone, at(err, s.position())
		}
		if c != ctrlNone {
			return c, nil
		}
	}
	return ctrlNone, nil
}

func (r *renderer) execOne(s stmt, sc *scope) (ctrl, error) {
	switch s := s.(type) {
	case *dataStmt:
		return ctrlNone, r.write(s.text)
	case *outputStmt:
		v, err := r.eval(s.x, sc)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.write(r.str(v))
	case *ifStmt:
		for _, br := range s.branches {
			v, err := r.eval(br.test, sc)
			if err != nil {
				return ctrlNone, err
			}
			if truthy(v) {
				return r.exec(br.body, sc)
			}
		}
		return r.exec(s.else_, sc)
	case *forStmt:
		v, err := r.eval(s.iter, sc)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.execFor(s, v, sc, 0)
	case *setStmt:
		v, err := r.eval(s.x, sc)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.assign(s.target, v, sc)
	case *setBlockStmt:
		inner := newScope(sc)
		predeclare(inner, s.decl)
		text, _, err := r.capture(s.body, inner)
		if err != nil {
			return ctrlNone, err
		}
		var v any = text
		if s.filter != nil {
			if v, err = r.evalFilter(s.filter, sc, text); err != nil {
				return ctrlNone, err
			}
		}
		return ctrlNone, r.assign(s.target, v, sc)
	case *macroStmt:
		sc.vars[s.name] = &macroValue{name: s.name, def: s, scope: sc}
		return ctrlNone, nil
	case *callBlockStmt:
		caller := &macroValue{name: "caller", def: s.mac, scope: sc}
		v, err := r.evalCall(s.call, sc, &kwarg{name: "caller", val: caller})
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.write(r.str(v))
	case *filterBlockStmt:
		inner := newScope(sc)
		predeclare(inner, s.decl)
		text, _, err := r.capture(s.body, inner)
		if err != nil {
			return ctrlNone, err
		}
		v, err := r.evalFilter(s.filter, sc, text)
		if err != nil {
			return ctrlNone, err
		}
		return ctrlNone, r.write(r.str(v))
	case *withStmt:
		inner := newScope(sc)
		predeclare(inner, s.decl)
		for i, t := range s.targets {
			v, err := r.eval(s.values[i], sc)
			if err != nil {
				return ctrlNone, err
			}
			if err := r.assign(t, v, inner); err != nil {
				return ctrlNone, err
			}
		}
		return r.exec(s.body, inner)
	case *loopControlStmt:
		if s.break_ {
			return ctrlBreak, nil
		}
		return ctrlContinue, nil
	case *blockStmt:
		inner := newScope(sc)
		predeclare(inner, s.decl)
		return r.exec(s.body, inner)
	}
	return ctrlNone, newErr(ErrUnsupported, "unknown statement %T", s)
}

// assign binds v to a set/for/with target in sc.
func (r *renderer) assign(t target, v any, sc *scope) error {
	switch t := t.(type) {
	case *nameTarget:
		sc.vars[t.name] = v
		return nil
	case *tupleTarget:
		items, err := r.iterate(v)
		if err != nil {
			if e, ok := err.(*Error); ok && e.Kind == ErrType {
				return typeErr("cannot unpack non-iterable %s object", typeName(v))
			}
			return err
		}
		if len(items) < len(t.items) {
			return valueErr("not enough values to unpack (expected %d, got %d)", len(t.items), len(items))
		}
		if len(items) > len(t.items) {
			return valueErr("too many values to unpack (expected %d)", len(t.items))
		}
		for i, sub := range t.items {
			if err := r.assign(sub, items[i], sc); err != nil {
				return err
			}
		}
		return nil
	case *nsTarget:
		obj, ok := sc.lookup(t.name)
		if !ok {
			obj, ok = r.ctx[t.name]
		}
		ns, isNS := obj.(*namespace)
		if !ok || !isNS {
			return newErr(ErrRuntime, "cannot assign attribute on non-namespace object")
		}
		ns.attrs.Set(t.attr, v)
		return nil
	}
	return newErr(ErrUnsupported, "unknown assignment target %T", t)
}

// loopValue is the loop variable of a for statement.
type loopValue struct {
	items      []any
	index0     int
	depth0     int
	lastChange any
	changed    bool
	recurse    func(v any) (any, error) // set for recursive loops
}

func (r *renderer) execFor(s *forStmt, iterable any, sc *scope, depth0 int) error {
	items, err := r.iterate(iterable)
	if err != nil {
		return err
	}
	if s.cond != nil {
		kept := items[:0:0]
		for _, it := range items {
			if err := r.step(1); err != nil {
				return err
			}
			fs := newScope(sc)
			if err := r.assign(s.target, it, fs); err != nil {
				return err
			}
			v, err := r.eval(s.cond, fs)
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	loop := &loopValue{items: items, depth0: depth0}
	if s.recursive {
		loop.recurse = func(v any) (any, error) {
			if err := r.enter(); err != nil {
				return nil, err
			}
			defer r.leave()
			saved := r.out
			var b strings.Builder
			r.out = &b
			err := r.execFor(s, v, sc, depth0+1)
			r.out = saved
			return b.String(), err
		}
	}
	for i, it := range items {
		if err := r.step(1); err != nil {
			return err
		}
		loop.index0 = i
		iter := newScope(sc)
		predeclare(iter, s.bodyDecl)
		if err := r.assign(s.target, it, iter); err != nil {
			return err
		}
		iter.vars["loop"] = loop
		c, err := r.exec(s.body, iter)
		if err != nil {
			return err
		}
		if c == ctrlBreak {
			break
		}
	}
	if len(items) == 0 && len(s.else_) > 0 {
		inner := newScope(sc)
		predeclare(inner, s.elseDecl)
		_, err := r.exec(s.else_, inner)
		return err
	}
	return nil
}

func (l *loopValue) attr(name string) (any, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.index0 + 1), true
	case "index0":
		return int64(l.index0), true
	case "revindex":
		return int64(n - l.index0), true
	case "revindex0":
		return int64(n - l.index0 - 1), true
	case "first":
		return l.index0 == 0, true
	case "last":
		return l.index0 == n-1, true
	case "length":
		return int64(n), true
	case "depth":
		return int64(l.depth0 + 1), true
	case "depth0":
		return int64(l.depth0), true
	case "previtem":
		if l.index0 == 0 {
			return undefMsg("there is no previous item"), true
		}
		return l.items[l.index0-1], true
	case "nextitem":
		if l.index0+1 >= n {
			return undefMsg("there is no next item"), true
		}
		return l.items[l.index0+1], true
	case "cycle":
		return &funcValue{name: "cycle", fn: func(r *renderer, args []any, kw []kwarg) (any, error) {
			if len(args) == 0 {
				return nil, typeErr("no items for cycling given")
			}
			return args[l.index0%len(args)], nil
		}}, true
	case "changed":
		return &funcValue{name: "changed", fn: func(r *renderer, args []any, kw []kwarg) (any, error) {
			v := Tuple(args)
			if l.changed && valuesEqual(l.lastChange, v) {
				return false, nil
			}
			l.lastChange, l.changed = v, true
			return true, nil
		}}, true
	}
	return nil, false
}

// macroValue is a macro (or a call block's caller) bound to the scope it
// was defined in; names it does not define resolve there at call time.
type macroValue struct {
	name  string
	def   *macroStmt
	scope *scope
}

func (r *renderer) callMacro(m *macroValue, args []any, kw []kwarg) (any, error) {
	if err := r.enter(); err != nil {
		return nil, err
	}
	defer r.leave()
	def := m.def
	sc := newScope(m.scope)
	predeclare(sc, def.decl)
	var extra []any
	for i, a := range args {
		if i < len(def.params) {
			sc.vars[def.params[i].name] = a
		} else {
			extra = append(extra, a)
		}
	}
	if len(extra) > 0 && !def.usesVarargs {
		return nil, typeErr("macro '%s' takes not more than %d argument(s)", m.name, len(def.params))
	}
	kwargs := NewDict()
	var caller any = undefMsg("No caller defined")
	for _, k := range kw {
		idx := -1
		for i, p := range def.params {
			if p.name == k.name {
				idx = i
				break
			}
		}
		switch {
		case idx >= 0:
			if idx < len(args) {
				return nil, typeErr("macro '%s' got multiple values for argument '%s'", m.name, k.name)
			}
			sc.vars[k.name] = k.val
		case k.name == "caller" && def.usesCaller:
			caller = k.val
		case def.usesKwargs:
			kwargs.Set(k.name, k.val)
		default:
			return nil, typeErr("macro '%s' takes no keyword argument '%s'", m.name, k.name)
		}
	}
	for _, p := range def.params {
		if _, ok := sc.vars[p.name]; ok {
			continue
		}
		if p.def == nil {
			sc.vars[p.name] = undefMsg(fmt.Sprintf("parameter '%s' was not provided", p.name))
			continue
		}
		v, err := r.eval(p.def, sc)
		if err != nil {
			return nil, err
		}
		sc.vars[p.name] = v
	}
	if def.usesVarargs {
		sc.vars["varargs"] = Tuple(extra)
	}
	if def.usesKwargs {
		sc.vars["kwargs"] = kwargs
	}
	if def.usesCaller {
		sc.vars["caller"] = caller
	}
	text, _, err := r.capture(def.body, sc)
	if err != nil {
		return nil, err
	}
	return text, nil
}

func (r *renderer) lookupName(name string, sc *scope) any {
	if v, ok := sc.lookup(name); ok {
		return v
	}
	if v, ok := r.ctx[name]; ok {
		return v
	}
	if v, ok := globals[name]; ok {
		return v
	}
	return undefName(name)
}

func (r *renderer) eval(x expr, sc *scope) (any, error) {
	if err := r.step(1); err != nil {
		return nil, err
	}
	v, err := r.evalNode(x, sc)
	if err != nil {
		return nil, at(err, x.position())
	}
	// Charge large strings by size, so a loop that keeps copying a big
	// string runs out of budget instead of copying gigabytes.
	if s, ok := v.(string); ok && len(s) > 4096 {
		if err := r.step(int64(len(s) / 256)); err != nil {
			return nil, at(err, x.position())
		}
	}
	return v, nil
}

func (r *renderer) evalNode(x expr, sc *scope) (any, error) {
	switch e := x.(type) {
	case *constExpr:
		return e.val, nil
	case *nameExpr:
		return r.lookupName(e.name, sc), nil
	case *listExpr:
		out := make([]any, len(e.items))
		for i, it := range e.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *tupleExpr:
		out := make(Tuple, len(e.items))
		for i, it := range e.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case *dictExpr:
		d := NewDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i], sc)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(e.vals[i], sc)
			if err != nil {
				return nil, err
			}
			if err := d.setAny(k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *getattrExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		return r.getattr(obj, e.attr)
	case *getitemExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		if sl, ok := e.key.(*sliceExpr); ok {
			return r.evalSlice(obj, sl, sc)
		}
		key, err := r.eval(e.key, sc)
		if err != nil {
			return nil, err
		}
		return r.getitem(obj, key)
	case *sliceExpr:
		return nil, newErr(ErrUnsupported, "slice outside a subscript")
	case *callExpr:
		return r.evalCall(e, sc, nil)
	case *filterExpr:
		return r.evalFilter(e, sc, nil)
	case *testExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		args, kw, err := r.evalArgs(&e.callArgs, sc)
		if err != nil {
			return nil, err
		}
		return r.runTest(e.name, obj, args, kw)
	case *binExpr:
		l, err := r.eval(e.l, sc)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return r.eval(e.r, sc)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return r.eval(e.r, sc)
		}
		rv, err := r.eval(e.r, sc)
		if err != nil {
			return nil, err
		}
		return r.binary(e.op, l, rv)
	case *unaryExpr:
		v, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		return unary(e.op, v)
	case *compareExpr:
		left, err := r.eval(e.first, sc)
		if err != nil {
			return nil, err
		}
		for _, op := range e.ops {
			right, err := r.eval(op.x, sc)
			if err != nil {
				return nil, err
			}
			ok, err := r.compare(op.op, left, right)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			left = right
		}
		return true, nil
	case *condExpr:
		t, err := r.eval(e.test, sc)
		if err != nil {
			return nil, err
		}
		if truthy(t) {
			return r.eval(e.then, sc)
		}
		if e.else_ == nil {
			return undefMsg("the inline if-expression evaluated to false and no else section was defined."), nil
		}
		return r.eval(e.else_, sc)
	}
	return nil, newErr(ErrUnsupported, "unknown expression %T", x)
}

func (r *renderer) evalSlice(obj any, sl *sliceExpr, sc *scope) (any, error) {
	var parts [3]any
	for i, x := range []expr{sl.start, sl.stop, sl.step} {
		if x == nil {
			continue
		}
		v, err := r.eval(x, sc)
		if err != nil {
			return nil, err
		}
		parts[i] = v
	}
	if u, ok := obj.(*undefined); ok {
		return nil, u.fail()
	}
	return sliceValue(obj, parts[0], parts[1], parts[2])
}

func (r *renderer) evalArgs(a *callArgs, sc *scope) ([]any, []kwarg, error) {
	args := make([]any, 0, len(a.args))
	for _, x := range a.args {
		v, err := r.eval(x, sc)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	var kw []kwarg
	for _, k := range a.kwargs {
		v, err := r.eval(k.val, sc)
		if err != nil {
			return nil, nil, err
		}
		kw = append(kw, kwarg{name: k.name, val: v})
	}
	if a.dynArgs != nil {
		v, err := r.eval(a.dynArgs, sc)
		if err != nil {
			return nil, nil, err
		}
		items, err := r.iterate(v)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, items...)
	}
	if a.dynKwargs != nil {
		v, err := r.eval(a.dynKwargs, sc)
		if err != nil {
			return nil, nil, err
		}
		d, ok := v.(*Dict)
		if !ok {
			return nil, nil, typeErr("argument after ** must be a mapping, not %s", typeName(v))
		}
		for i, k := range d.keys {
			ks, ok := k.(string)
			if !ok {
				return nil, nil, typeErr("keywords must be strings")
			}
			kw = append(kw, kwarg{name: ks, val: d.vals[i]})
		}
	}
	return args, kw, nil
}

func (r *renderer) evalCall(e *callExpr, sc *scope, extra *kwarg) (any, error) {
	fn, err := r.eval(e.fn, sc)
	if err != nil {
		return nil, err
	}
	args, kw, err := r.evalArgs(&e.callArgs, sc)
	if err != nil {
		return nil, err
	}
	if extra != nil {
		kw = append(kw, *extra)
	}
	return r.call(fn, args, kw)
}

func (r *renderer) call(fn any, args []any, kw []kwarg) (any, error) {
	switch f := fn.(type) {
	case *funcValue:
		return f.fn(r, args, kw)
	case *macroValue:
		return r.callMacro(f, args, kw)
	case *loopValue:
		if f.recurse == nil {
			return nil, typeErr("The loop must have the 'recursive' marker to be called recursively.")
		}
		if len(args) != 1 {
			return nil, typeErr("loop() takes exactly one argument")
		}
		return f.recurse(args[0])
	case *undefined:
		return nil, f.fail()
	}
	return nil, typeErr("'%s' object is not callable", typeName(fn))
}

// evalFilter applies f; input replaces the innermost missing operand of a
// filter block or block set.
func (r *renderer) evalFilter(f *filterExpr, sc *scope, input any) (any, error) {
	var v any = input
	if f.obj != nil {
		var err error
		if inner, ok := f.obj.(*filterExpr); ok && input != nil {
			v, err = r.evalFilter(inner, sc, input)
		} else {
			v, err = r.eval(f.obj, sc)
		}
		if err != nil {
			return nil, err
		}
	}
	args, kw, err := r.evalArgs(&f.callArgs, sc)
	if err != nil {
		return nil, at(err, f.p)
	}
	out, err := r.applyFilter(f.name, v, args, kw)
	if err != nil {
		return nil, at(err, f.p)
	}
	return out, nil
}

func (r *renderer) applyFilter(name string, v any, args []any, kw []kwarg) (any, error) {
	fn, ok := filters[name]
	if !ok {
		return nil, newErr(ErrRuntime, "No filter named '%s' found.", name)
	}
	return fn(r, v, args, kw)
}

func (r *renderer) runTest(name string, v any, args []any, kw []kwarg) (bool, error) {
	fn, ok := tests[name]
	if !ok {
		return false, newErr(ErrRuntime, "No test named '%s' found.", name)
	}
	return fn(r, v, args, kw)
}
