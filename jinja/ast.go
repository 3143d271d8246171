package jinja

// Expressions.

type expr interface{ position() pos }

type (
	constExpr struct {
		p   pos
		val any
	}
	nameExpr struct {
		p    pos
		name string
	}
	listExpr struct {
		p     pos
		items []expr
	}
	tupleExpr struct {
		p     pos
		items []expr
	}
	dictExpr struct {
		p          pos
		keys, vals []expr
	}
	getattrExpr struct {
		p    pos
		obj  expr
		attr string
	}
	getitemExpr struct {
		p        pos
		obj, key expr
	}
	sliceExpr struct {
		p                 pos
		start, stop, step expr // nil when omitted
	}
	callArgs struct {
		args      []expr
		kwargs    []kwargExpr
		dynArgs   expr
		dynKwargs expr
	}
	kwargExpr struct {
		name string
		val  expr
	}
	callExpr struct {
		p  pos
		fn expr
		callArgs
	}
	// filterExpr applies a filter; obj is nil for the innermost filter of a
	// {% filter %} or block {% set %}, which receives the rendered body.
	filterExpr struct {
		p    pos
		obj  expr
		name string
		soft bool // unknown names fail at render time, not parse time
		callArgs
	}
	testExpr struct {
		p    pos
		obj  expr
		name string
		soft bool
		callArgs
	}
	binExpr struct {
		p    pos
		op   string // + - * / // % ** ~ and or
		l, r expr
	}
	unaryExpr struct {
		p  pos
		op string // - + not
		x  expr
	}
	compareExpr struct {
		p     pos
		first expr
		ops   []compareOp
	}
	compareOp struct {
		op string // == != < <= > >= in notin
		x  expr
	}
	condExpr struct {
		p                 pos
		test, then, else_ expr // else_ nil: Undefined when the test fails
	}
)

func (e *constExpr) position() pos   { return e.p }
func (e *nameExpr) position() pos    { return e.p }
func (e *listExpr) position() pos    { return e.p }
func (e *tupleExpr) position() pos   { return e.p }
func (e *dictExpr) position() pos    { return e.p }
func (e *getattrExpr) position() pos { return e.p }
func (e *getitemExpr) position() pos { return e.p }
func (e *sliceExpr) position() pos   { return e.p }
func (e *callExpr) position() pos    { return e.p }
func (e *filterExpr) position() pos  { return e.p }
func (e *testExpr) position() pos    { return e.p }
func (e *binExpr) position() pos     { return e.p }
func (e *unaryExpr) position() pos   { return e.p }
func (e *compareExpr) position() pos { return e.p }
func (e *condExpr) position() pos    { return e.p }

// Assignment targets.

type target interface{ position() pos }

type (
	nameTarget struct {
		p    pos
		name string
	}
	tupleTarget struct {
		p     pos
		items []target
	}
	nsTarget struct {
		p          pos
		name, attr string
	}
)

func (t *nameTarget) position() pos  { return t.p }
func (t *tupleTarget) position() pos { return t.p }
func (t *nsTarget) position() pos    { return t.p }

// Statements.

type stmt interface{ position() pos }

type (
	dataStmt struct {
		p    pos
		text string
	}
	outputStmt struct {
		p pos
		x expr
	}
	ifBranch struct {
		test expr
		body []stmt
	}
	ifStmt struct {
		p        pos
		branches []ifBranch
		else_    []stmt
	}
	forStmt struct {
		p         pos
		target    target
		iter      expr
		cond      expr
		body      []stmt
		else_     []stmt
		recursive bool
		// Names pre-bound to Undefined in each iteration and in the else
		// branch (see scope.go).
		bodyDecl, elseDecl []string
	}
	setStmt struct {
		p      pos
		target target
		x      expr
	}
	setBlockStmt struct {
		p      pos
		target target
		filter *filterExpr // may be nil
		body   []stmt
		decl   []string
	}
	param struct {
		name string
		def  expr // nil: no default
	}
	macroStmt struct {
		p      pos
		name   string
		params []param
		body   []stmt
		// Which of the implicit names the body reads; jinja2 only accepts
		// surplus arguments or a caller when the body can see them.
		usesVarargs, usesKwargs, usesCaller bool
		decl                                []string
	}
	callBlockStmt struct {
		p    pos
		call *callExpr
		mac  *macroStmt // the caller() the block defines
	}
	filterBlockStmt struct {
		p      pos
		filter *filterExpr
		body   []stmt
		decl   []string
	}
	withStmt struct {
		p       pos
		targets []target
		values  []expr
		body    []stmt
		decl    []string
	}
	loopControlStmt struct {
		p      pos
		break_ bool
	}
	blockStmt struct { // {% generation %}: renders its body unchanged
		p    pos
		body []stmt
		decl []string
	}
)

func (s *dataStmt) position() pos        { return s.p }
func (s *outputStmt) position() pos      { return s.p }
func (s *ifStmt) position() pos          { return s.p }
func (s *forStmt) position() pos         { return s.p }
func (s *setStmt) position() pos         { return s.p }
func (s *setBlockStmt) position() pos    { return s.p }
func (s *macroStmt) position() pos       { return s.p }
func (s *callBlockStmt) position() pos   { return s.p }
func (s *filterBlockStmt) position() pos { return s.p }
func (s *withStmt) position() pos        { return s.p }
func (s *loopControlStmt) position() pos { return s.p }
func (s *blockStmt) position() pos       { return s.p }
