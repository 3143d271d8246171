package jinja

// jinja2 compiles every frame (the template body, a loop body, a macro, a
// block set...) into Python locals, and decides per name, before running,
// where a frame's variable starts out. A name whose first use in a frame is
// an unconditional {% set %} starts out *undefined* for the whole frame
// unless an enclosing frame already knows the name: code running before the
// assignment, such as an earlier loop, then sees Undefined rather than the
// context variable of the same name. Names first read, or only assigned
// inside some if branches, resolve from the enclosing scopes and the
// context, which plain dynamic lookup already gives. This pass computes,
// per frame, the names to pre-bind to Undefined.

type symTable struct {
	refs      map[string]bool // names the frame loads or stores
	undefInit map[string]bool // first reference was an unconditional store
	stores    map[string]bool
}

func newSymTable() *symTable {
	return &symTable{refs: map[string]bool{}, undefInit: map[string]bool{}, stores: map[string]bool{}}
}

func (s *symTable) copy() *symTable {
	c := newSymTable()
	for k := range s.refs {
		c.refs[k] = true
	}
	for k := range s.undefInit {
		c.undefInit[k] = true
	}
	for k := range s.stores {
		c.stores[k] = true
	}
	return c
}

func (s *symTable) load(name string) { s.refs[name] = true }

func (s *symTable) store(name string) {
	s.stores[name] = true
	if !s.refs[name] {
		s.refs[name] = true
		s.undefInit[name] = true
	}
}

// branchUpdate merges the three branch groups of an if (body, elifs, else):
// a name first assigned in a branch stays undefined-initialised only when
// every group assigns it; otherwise jinja2 resolves it from outside.
func (s *symTable) branchUpdate(branches []*symTable) {
	counts := map[string]int{}
	for _, b := range branches {
		for n := range b.stores {
			if !s.stores[n] && b.undefInit[n] {
				counts[n]++
			}
		}
	}
	newRefs := map[string]bool{}
	for _, b := range branches {
		for n := range b.refs {
			if !s.refs[n] {
				newRefs[n] = true
			}
		}
		for n := range b.stores {
			s.stores[n] = true
		}
	}
	for n := range newRefs {
		s.refs[n] = true
		if counts[n] == len(branches) {
			s.undefInit[n] = true
		}
	}
}

// frameJob is a nested frame waiting for its parent's analysis to finish.
type frameJob struct {
	params []string
	visit  func(a *analyzer, s *symTable)
	set    func(decl []string)
}

type analyzer struct {
	jobs []frameJob
}

// analyzeFrames computes the pre-bound names of the root frame and, through
// the nodes, of every nested frame.
func analyzeFrames(body []stmt) []string {
	var root []string
	analyzeFrame(nil, frameJob{visit: func(a *analyzer, s *symTable) { a.stmts(body, s) }, set: func(d []string) { root = d }})
	return root
}

func analyzeFrame(ancestors []*symTable, job frameJob) {
	s := newSymTable()
	for _, p := range job.params {
		s.refs[p] = true
	}
	a := &analyzer{}
	job.visit(a, s)
	var decl []string
	for n := range s.undefInit {
		known := false
		for _, anc := range ancestors {
			if anc.refs[n] {
				known = true
				break
			}
		}
		if !known {
			decl = append(decl, n)
		}
	}
	job.set(decl)
	chain := append(append([]*symTable{}, ancestors...), s)
	for _, child := range a.jobs {
		analyzeFrame(chain, child)
	}
}

func (a *analyzer) child(params []string, visit func(a *analyzer, s *symTable), set func([]string)) {
	a.jobs = append(a.jobs, frameJob{params: params, visit: visit, set: set})
}

func (a *analyzer) stmts(body []stmt, s *symTable) {
	for _, st := range body {
		a.stmt(st, s)
	}
}

func targetNames(t target, out []string) []string {
	switch t := t.(type) {
	case *nameTarget:
		out = append(out, t.name)
	case *tupleTarget:
		for _, it := range t.items {
			out = targetNames(it, out)
		}
	}
	return out
}

func (a *analyzer) storeTarget(t target, s *symTable) {
	if ns, ok := t.(*nsTarget); ok {
		s.load(ns.name)
		return
	}
	for _, n := range targetNames(t, nil) {
		s.store(n)
	}
}

func macroParams(m *macroStmt) []string {
	var ps []string
	for _, p := range m.params {
		ps = append(ps, p.name)
	}
	return append(ps, "varargs", "kwargs", "caller")
}

func (a *analyzer) stmt(st stmt, s *symTable) {
	switch st := st.(type) {
	case *outputStmt:
		a.expr(st.x, s)
	case *ifStmt:
		a.expr(st.branches[0].test, s)
		body := s.copy()
		a.stmts(st.branches[0].body, body)
		elifs := s.copy()
		for _, br := range st.branches[1:] {
			a.expr(br.test, elifs)
			a.stmts(br.body, elifs)
		}
		els := s.copy()
		a.stmts(st.else_, els)
		s.branchUpdate([]*symTable{body, elifs, els})
	case *forStmt:
		a.expr(st.iter, s)
		params := append(targetNames(st.target, nil), "loop")
		a.child(params, func(a *analyzer, fs *symTable) {
			if st.cond != nil {
				a.expr(st.cond, fs)
			}
			a.stmts(st.body, fs)
		}, func(d []string) { st.bodyDecl = d })
		a.child(nil, func(a *analyzer, fs *symTable) { a.stmts(st.else_, fs) }, func(d []string) { st.elseDecl = d })
	case *setStmt:
		a.expr(st.x, s)
		a.storeTarget(st.target, s)
	case *setBlockStmt:
		a.storeTarget(st.target, s)
		a.child(nil, func(a *analyzer, fs *symTable) {
			if st.filter != nil {
				a.expr(st.filter, fs)
			}
			a.stmts(st.body, fs)
		}, func(d []string) { st.decl = d })
	case *macroStmt:
		s.store(st.name)
		a.macro(st)
	case *callBlockStmt:
		a.expr(st.call, s)
		a.macro(st.mac)
	case *filterBlockStmt:
		a.expr(st.filter, s)
		a.child(nil, func(a *analyzer, fs *symTable) { a.stmts(st.body, fs) }, func(d []string) { st.decl = d })
	case *withStmt:
		for _, v := range st.values {
			a.expr(v, s)
		}
		var params []string
		for _, t := range st.targets {
			params = targetNames(t, params)
		}
		a.child(params, func(a *analyzer, fs *symTable) { a.stmts(st.body, fs) }, func(d []string) { st.decl = d })
	case *blockStmt:
		a.child(nil, func(a *analyzer, fs *symTable) { a.stmts(st.body, fs) }, func(d []string) { st.decl = d })
	}
}

func (a *analyzer) macro(m *macroStmt) {
	a.child(macroParams(m), func(a *analyzer, fs *symTable) {
		for _, p := range m.params {
			if p.def != nil {
				a.expr(p.def, fs)
			}
		}
		a.stmts(m.body, fs)
	}, func(d []string) { m.decl = d })
}

func (a *analyzer) args(c *callArgs, s *symTable) {
	for _, x := range c.args {
		a.expr(x, s)
	}
	for _, k := range c.kwargs {
		a.expr(k.val, s)
	}
	if c.dynArgs != nil {
		a.expr(c.dynArgs, s)
	}
	if c.dynKwargs != nil {
		a.expr(c.dynKwargs, s)
	}
}

func (a *analyzer) expr(x expr, s *symTable) {
	switch e := x.(type) {
	case nil:
	case *nameExpr:
		s.load(e.name)
	case *listExpr:
		for _, it := range e.items {
			a.expr(it, s)
		}
	case *tupleExpr:
		for _, it := range e.items {
			a.expr(it, s)
		}
	case *dictExpr:
		for i := range e.keys {
			a.expr(e.keys[i], s)
			a.expr(e.vals[i], s)
		}
	case *getattrExpr:
		a.expr(e.obj, s)
	case *getitemExpr:
		a.expr(e.obj, s)
		a.expr(e.key, s)
	case *sliceExpr:
		if e.start != nil {
			a.expr(e.start, s)
		}
		if e.stop != nil {
			a.expr(e.stop, s)
		}
		if e.step != nil {
			a.expr(e.step, s)
		}
	case *callExpr:
		a.expr(e.fn, s)
		a.args(&e.callArgs, s)
	case *filterExpr:
		if e.obj != nil {
			a.expr(e.obj, s)
		}
		a.args(&e.callArgs, s)
	case *testExpr:
		a.expr(e.obj, s)
		a.args(&e.callArgs, s)
	case *binExpr:
		a.expr(e.l, s)
		a.expr(e.r, s)
	case *unaryExpr:
		a.expr(e.x, s)
	case *compareExpr:
		a.expr(e.first, s)
		for _, op := range e.ops {
			a.expr(op.x, s)
		}
	case *condExpr:
		// jinja2 visits the then-branch before the test.
		a.expr(e.then, s)
		a.expr(e.test, s)
		if e.else_ != nil {
			a.expr(e.else_, s)
		}
	}
}

// predeclare binds the frame's undefined-initialised names in sc.
func predeclare(sc *scope, names []string) {
	for _, n := range names {
		sc.vars[n] = undefName(n)
	}
}
