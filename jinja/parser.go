package jinja

import (
	"fmt"
	"strings"
)

// maxParseDepth bounds expression and block nesting so hostile input cannot
// recurse the parser without limit.
const maxParseDepth = 400

type parser struct {
	toks  []token
	i     int
	depth int
	// soft is true while parsing an if test or body (outside any nested
	// loop or macro): jinja2 then defers unknown filter and test names to
	// render time instead of rejecting the template.
	soft bool
	// loops counts enclosing for loops within the current macro body, to
	// reject break and continue outside a loop.
	loops int
	// reads collects the names loaded inside the macro bodies being parsed.
	reads []map[string]bool
	// endTokens holds the end tags being looked for, for error messages.
	endTokens [][]string
}

func parse(src string) ([]stmt, error) {
	toks, err := tokenize(normalizeSource(src))
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	body, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if p.cur().kind != tokEOF {
		return nil, p.fail(p.cur(), "unexpected %s", p.cur().describe())
	}
	return body, nil
}

func (p *parser) cur() token { return p.toks[p.i] }

func (p *parser) look() token {
	if p.i+1 < len(p.toks) {
		return p.toks[p.i+1]
	}
	return p.toks[len(p.toks)-1]
}

func (p *parser) next() token {
	t := p.toks[p.i]
	if p.i < len(p.toks)-1 {
		p.i++
	}
	return t
}

func (p *parser) fail(t token, format string, args ...any) error {
	e := newErr(ErrSyntax, format, args...)
	e.Line, e.Col = t.p.line, t.p.col
	return e
}

func (p *parser) isOp(op string) bool {
	t := p.cur()
	return t.kind == tokOp && t.val == op
}

func (p *parser) isName(name string) bool {
	t := p.cur()
	return t.kind == tokName && t.val == name
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(name string) bool {
	if p.isName(name) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) (token, error) {
	if !p.isOp(op) {
		return token{}, p.unexpected(fmt.Sprintf("'%s'", op))
	}
	return p.next(), nil
}

func (p *parser) expectKind(k tokenKind, what string) (token, error) {
	if p.cur().kind != k {
		return token{}, p.unexpected(what)
	}
	return p.next(), nil
}

func (p *parser) expectName() (token, error) { return p.expectKind(tokName, "'name'") }

func (p *parser) unexpected(want string) error {
	t := p.cur()
	if t.kind == tokEOF {
		return p.fail(t, "unexpected end of template, expected %s.", want)
	}
	return p.fail(t, "expected token %s, got '%s'", want, t.describe())
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxParseDepth {
		return p.fail(p.cur(), "template nesting exceeds %d levels", maxParseDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// subparse reads template data, prints and statements until one of
// endTags opens a block (left as the current token) or the template ends.
func (p *parser) subparse(endTags []string) ([]stmt, error) {
	if endTags != nil {
		p.endTokens = append(p.endTokens, endTags)
		defer func() { p.endTokens = p.endTokens[:len(p.endTokens)-1] }()
	}
	var body []stmt
	for {
		t := p.cur()
		switch t.kind {
		case tokEOF:
			return body, nil
		case tokData:
			p.next()
			body = append(body, &dataStmt{p: t.p, text: t.val})
		case tokVarBegin:
			p.next()
			x, err := p.parseTuple(false, true, nil, false)
			if err != nil {
				return nil, err
			}
			if _, err := p.expectKind(tokVarEnd, "'end of print statement'"); err != nil {
				return nil, err
			}
			body = append(body, &outputStmt{p: t.p, x: x})
		case tokBlockBegin:
			p.next()
			if endTags != nil && p.cur().kind == tokName {
				for _, e := range endTags {
					if p.cur().val == e {
						return body, nil
					}
				}
			}
			s, err := p.parseStatement()
			if err != nil {
				return nil, err
			}
			if s != nil {
				body = append(body, s)
			}
			if _, err := p.expectKind(tokBlockEnd, "'end of statement block'"); err != nil {
				return nil, err
			}
		default:
			return nil, p.fail(t, "unexpected %s", t.describe())
		}
	}
}

// parseStatements parses the body of a block statement up to one of
// endTags; with dropNeedle the end tag's name is consumed.
func (p *parser) parseStatements(endTags []string, dropNeedle bool) ([]stmt, error) {
	p.skipOp(":")
	if _, err := p.expectKind(tokBlockEnd, "'end of statement block'"); err != nil {
		return nil, err
	}
	body, err := p.subparse(endTags)
	if err != nil {
		return nil, err
	}
	if p.cur().kind == tokEOF {
		return nil, p.failEOF(endTags)
	}
	if dropNeedle {
		p.next()
	}
	return body, nil
}

func (p *parser) failEOF(endTags []string) error {
	quoted := make([]string, len(endTags))
	for i, e := range endTags {
		quoted[i] = "'" + e + "'"
	}
	return p.fail(p.cur(), "Unexpected end of template. Jinja was looking for the following tags: %s.", strings.Join(quoted, " or "))
}

func (p *parser) parseStatement() (stmt, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.cur()
	if t.kind != tokName {
		return nil, p.fail(t, "tag name expected")
	}
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor()
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "call":
		return p.parseCallBlock()
	case "filter":
		return p.parseFilterBlock()
	case "with":
		return p.parseWith()
	case "print":
		p.next()
		x, err := p.parseTuple(false, true, nil, false)
		if err != nil {
			return nil, err
		}
		return &outputStmt{p: t.p, x: x}, nil
	case "break", "continue":
		p.next()
		if p.loops == 0 {
			return nil, p.fail(t, "'%s' outside loop", t.val)
		}
		return &loopControlStmt{p: t.p, break_: t.val == "break"}, nil
	case "generation":
		p.next()
		body, err := p.parseStatements([]string{"endgeneration"}, true)
		if err != nil {
			return nil, err
		}
		return &blockStmt{p: t.p, body: body}, nil
	case "block", "extends", "include", "import", "from", "autoescape", "do":
		return nil, &Error{Kind: ErrUnsupported, Msg: fmt.Sprintf("the '%s' tag is not supported", t.val), Line: t.p.line, Col: t.p.col}
	}
	msg := fmt.Sprintf("Encountered unknown tag '%s'.", t.val)
	if len(p.endTokens) > 0 {
		last := p.endTokens[len(p.endTokens)-1]
		quoted := make([]string, len(last))
		for i, e := range last {
			quoted[i] = "'" + e + "'"
		}
		msg += fmt.Sprintf(" Jinja was looking for the following tags: %s.", strings.Join(quoted, " or "))
	}
	return nil, p.fail(t, "%s", msg)
}

func (p *parser) parseIf() (stmt, error) {
	t := p.next()
	s := &ifStmt{p: t.p}
	saved := p.soft
	p.soft = true
	defer func() { p.soft = saved }()
	for {
		test, err := p.parseTuple(false, false, nil, false)
		if err != nil {
			return nil, err
		}
		body, err := p.parseStatements([]string{"elif", "else", "endif"}, false)
		if err != nil {
			return nil, err
		}
		s.branches = append(s.branches, ifBranch{test: test, body: body})
		tag := p.next()
		if tag.val == "elif" {
			continue
		}
		if tag.val == "else" {
			if s.else_, err = p.parseStatements([]string{"endif"}, true); err != nil {
				return nil, err
			}
		}
		return s, nil
	}
}

func (p *parser) parseFor() (stmt, error) {
	t := p.next()
	tgt, err := p.parseAssignTarget(true, false, []string{"in"})
	if err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.unexpected("'in'")
	}
	iter, err := p.parseTuple(false, false, []string{"recursive"}, false)
	if err != nil {
		return nil, err
	}
	s := &forStmt{p: t.p, target: tgt, iter: iter}
	savedSoft := p.soft
	p.soft = false
	defer func() { p.soft = savedSoft }()
	if p.skipName("if") {
		if s.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	s.recursive = p.skipName("recursive")
	p.loops++
	s.body, err = p.parseStatements([]string{"endfor", "else"}, false)
	p.loops--
	if err != nil {
		return nil, err
	}
	if p.next().val == "else" {
		if s.else_, err = p.parseStatements([]string{"endfor"}, true); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (p *parser) parseSet() (stmt, error) {
	t := p.next()
	tgt, err := p.parseAssignTarget(true, true, nil)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		x, err := p.parseTuple(false, true, nil, false)
		if err != nil {
			return nil, err
		}
		return &setStmt{p: t.p, target: tgt, x: x}, nil
	}
	f, err := p.parseFilter(nil, false)
	if err != nil {
		return nil, err
	}
	body, err := p.parseStatements([]string{"endset"}, true)
	if err != nil {
		return nil, err
	}
	s := &setBlockStmt{p: t.p, target: tgt, body: body}
	if f != nil {
		s.filter = f.(*filterExpr)
	}
	return s, nil
}

// macroBody parses a macro or call-block body with its own loop context.
func (p *parser) macroBody(m *macroStmt, end string) error {
	savedLoops, savedSoft := p.loops, p.soft
	p.loops, p.soft = 0, false
	p.reads = append(p.reads, map[string]bool{})
	body, err := p.parseStatements([]string{end}, true)
	reads := p.reads[len(p.reads)-1]
	p.reads = p.reads[:len(p.reads)-1]
	p.loops, p.soft = savedLoops, savedSoft
	if err != nil {
		return err
	}
	m.body = body
	m.usesVarargs, m.usesKwargs, m.usesCaller = reads["varargs"], reads["kwargs"], reads["caller"]
	return nil
}

func (p *parser) parseMacro() (stmt, error) {
	t := p.next()
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	m := &macroStmt{p: t.p, name: name.val}
	if m.params, err = p.parseSignature(); err != nil {
		return nil, err
	}
	if err := p.macroBody(m, "endmacro"); err != nil {
		return nil, err
	}
	return m, nil
}

func (p *parser) parseSignature() ([]param, error) {
	if _, err := p.expectOp("("); err != nil {
		return nil, err
	}
	var params []param
	seenDefault := false
	for !p.isOp(")") {
		if len(params) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		name, err := p.expectName()
		if err != nil {
			return nil, err
		}
		prm := param{name: name.val}
		if p.skipOp("=") {
			if prm.def, err = p.parseExpression(true); err != nil {
				return nil, err
			}
			seenDefault = true
		} else if seenDefault {
			return nil, p.fail(name, "non-default argument follows default argument")
		}
		params = append(params, prm)
	}
	p.next()
	return params, nil
}

func (p *parser) parseCallBlock() (stmt, error) {
	t := p.next()
	m := &macroStmt{p: t.p, name: "caller"}
	if p.isOp("(") {
		var err error
		if m.params, err = p.parseSignature(); err != nil {
			return nil, err
		}
	}
	x, err := p.parseExpression(true)
	if err != nil {
		return nil, err
	}
	call, ok := x.(*callExpr)
	if !ok {
		return nil, p.fail(t, "expected call")
	}
	if err := p.macroBody(m, "endcall"); err != nil {
		return nil, err
	}
	return &callBlockStmt{p: t.p, call: call, mac: m}, nil
}

func (p *parser) parseFilterBlock() (stmt, error) {
	t := p.next()
	f, err := p.parseFilter(nil, true)
	if err != nil {
		return nil, err
	}
	body, err := p.parseStatements([]string{"endfilter"}, true)
	if err != nil {
		return nil, err
	}
	return &filterBlockStmt{p: t.p, filter: f.(*filterExpr), body: body}, nil
}

func (p *parser) parseWith() (stmt, error) {
	t := p.next()
	s := &withStmt{p: t.p}
	for p.cur().kind != tokBlockEnd {
		if len(s.targets) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		tgt, err := p.parseAssignTarget(true, false, nil)
		if err != nil {
			return nil, err
		}
		if _, err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		s.targets = append(s.targets, tgt)
		s.values = append(s.values, v)
	}
	body, err := p.parseStatements([]string{"endwith"}, true)
	if err != nil {
		return nil, err
	}
	s.body = body
	return s, nil
}

// parseAssignTarget parses a name, a tuple of names, or (withNamespace)
// ns.attr.
func (p *parser) parseAssignTarget(withTuple, withNamespace bool, extraEnd []string) (target, error) {
	t := p.cur()
	if withNamespace && t.kind == tokName && p.look().kind == tokOp && p.look().val == "." {
		p.next()
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return nil, err
		}
		return &nsTarget{p: t.p, name: t.val, attr: attr.val}, nil
	}
	var x expr
	var err error
	if withTuple {
		x, err = p.parseTuple(true, true, extraEnd, false)
	} else {
		x, err = p.parsePrimary()
	}
	if err != nil {
		return nil, err
	}
	return p.toTarget(x)
}

func (p *parser) toTarget(x expr) (target, error) {
	switch e := x.(type) {
	case *nameExpr:
		return &nameTarget{p: e.p, name: e.name}, nil
	case *tupleExpr:
		tt := &tupleTarget{p: e.p}
		for _, it := range e.items {
			sub, err := p.toTarget(it)
			if err != nil {
				return nil, err
			}
			tt.items = append(tt.items, sub)
		}
		return tt, nil
	}
	kind := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%T", x), "*jinja."), "Expr")
	e := newErr(ErrSyntax, "can't assign to '%s'", kind)
	pp := x.position()
	e.Line, e.Col = pp.line, pp.col
	return nil, e
}

// parseTuple parses a comma-separated expression list; a single element
// without a trailing comma is returned as itself.
func (p *parser) parseTuple(simplified, withCondExpr bool, extraEnd []string, explicitParens bool) (expr, error) {
	start := p.cur()
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isTupleEnd(extraEnd) {
			break
		}
		var x expr
		var err error
		if simplified {
			x, err = p.parsePrimary()
		} else {
			x, err = p.parseExpression(withCondExpr)
		}
		if err != nil {
			return nil, err
		}
		items = append(items, x)
		if p.isOp(",") {
			isTuple = true
		} else {
			break
		}
	}
	if !isTuple {
		if len(items) > 0 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.fail(p.cur(), "Expected an expression, got '%s'", p.cur().describe())
		}
	}
	return &tupleExpr{p: start.p, items: items}, nil
}

func (p *parser) isTupleEnd(extraEnd []string) bool {
	t := p.cur()
	if t.kind == tokVarEnd || t.kind == tokBlockEnd || t.kind == tokEOF || (t.kind == tokOp && t.val == ")") {
		return true
	}
	for _, e := range extraEnd {
		if t.kind == tokName && t.val == e {
			return true
		}
	}
	return false
}

func (p *parser) parseExpression(withCondExpr bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if withCondExpr {
		return p.parseCondExpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondExpr() (expr, error) {
	start := p.cur()
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		c := &condExpr{p: start.p, test: test, then: x}
		if p.skipName("else") {
			if err := p.enter(); err != nil {
				return nil, err
			}
			c.else_, err = p.parseCondExpr()
			p.leave()
			if err != nil {
				return nil, err
			}
		}
		x = c
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	x, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isName("or") {
		t := p.next()
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		x = &binExpr{p: t.p, op: "or", l: x, r: r}
	}
	return x, nil
}

func (p *parser) parseAnd() (expr, error) {
	x, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isName("and") {
		t := p.next()
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		x = &binExpr{p: t.p, op: "and", l: x, r: r}
	}
	return x, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		t := p.next()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{p: t.p, op: "not", x: x}, nil
	}
	return p.parseCompare()
}

var compareOps = map[string]bool{"==": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true}

func (p *parser) parseCompare() (expr, error) {
	start := p.cur()
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	var ops []compareOp
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tokOp && compareOps[t.val]:
			p.next()
			op = t.val
		case p.isName("in"):
			p.next()
			op = "in"
		case p.isName("not") && p.look().kind == tokName && p.look().val == "in":
			p.next()
			p.next()
			op = "notin"
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		ops = append(ops, compareOp{op: op, x: r})
	}
	if len(ops) == 0 {
		return x, nil
	}
	return &compareExpr{p: start.p, first: x, ops: ops}, nil
}

func (p *parser) parseMath1() (expr, error) {
	x, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		t := p.next()
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		x = &binExpr{p: t.p, op: t.val, l: x, r: r}
	}
	return x, nil
}

func (p *parser) parseConcat() (expr, error) {
	x, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	for p.isOp("~") {
		t := p.next()
		r, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		x = &binExpr{p: t.p, op: "~", l: x, r: r}
	}
	return x, nil
}

func (p *parser) parseMath2() (expr, error) {
	x, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		t := p.next()
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		x = &binExpr{p: t.p, op: t.val, l: x, r: r}
	}
	return x, nil
}

func (p *parser) parsePow() (expr, error) {
	x, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		t := p.next()
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		x = &binExpr{p: t.p, op: "**", l: x, r: r}
	}
	return x, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.cur()
	var x expr
	var err error
	if t.kind == tokOp && (t.val == "-" || t.val == "+") {
		p.next()
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		x = &unaryExpr{p: t.p, op: t.val, x: inner}
	} else if x, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	t := p.cur()
	switch t.kind {
	case tokName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{p: t.p, val: true}, nil
		case "false", "False":
			return &constExpr{p: t.p, val: false}, nil
		case "none", "None":
			return &constExpr{p: t.p, val: nil}, nil
		}
		for _, r := range p.reads {
			r[t.val] = true
		}
		return &nameExpr{p: t.p, name: t.val}, nil
	case tokString:
		p.next()
		s := t.val
		for p.cur().kind == tokString {
			s += p.next().val
		}
		return &constExpr{p: t.p, val: s}, nil
	case tokInt:
		p.next()
		return &constExpr{p: t.p, val: t.ival}, nil
	case tokFloat:
		p.next()
		return &constExpr{p: t.p, val: t.fval}, nil
	case tokOp:
		switch t.val {
		case "(":
			p.next()
			x, err := p.parseTuple(false, true, nil, true)
			if err != nil {
				return nil, err
			}
			if _, err := p.expectOp(")"); err != nil {
				return nil, err
			}
			return x, nil
		case "[":
			return p.parseList()
		case "{":
			return p.parseDict()
		}
	}
	if t.kind == tokEOF {
		return nil, p.fail(t, "unexpected end of template")
	}
	return nil, p.fail(t, "unexpected '%s'", t.describe())
}

func (p *parser) parseList() (expr, error) {
	t := p.next()
	l := &listExpr{p: t.p}
	for !p.isOp("]") {
		if len(l.items) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isOp("]") {
			break
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		l.items = append(l.items, x)
	}
	p.next()
	return l, nil
}

func (p *parser) parseDict() (expr, error) {
	t := p.next()
	d := &dictExpr{p: t.p}
	for !p.isOp("}") {
		if len(d.keys) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		if p.isOp("}") {
			break
		}
		k, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if _, err := p.expectOp(":"); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		d.keys = append(d.keys, k)
		d.vals = append(d.vals, v)
	}
	p.next()
	return d, nil
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp(".") || p.isOp("["):
			x, err = p.parseSubscript(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		var err error
		switch {
		case p.isOp("|"):
			x, err = p.parseFilter(x, false)
		case p.isName("is"):
			x, err = p.parseTest(x)
		case p.isOp("("):
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(x expr) (expr, error) {
	t := p.next()
	if t.val == "." {
		a := p.next()
		switch a.kind {
		case tokName:
			return &getattrExpr{p: t.p, obj: x, attr: a.val}, nil
		case tokInt:
			return &getitemExpr{p: t.p, obj: x, key: &constExpr{p: a.p, val: a.ival}}, nil
		}
		return nil, p.fail(a, "expected name or number")
	}
	var args []expr
	for !p.isOp("]") {
		if len(args) > 0 {
			if _, err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		a, err := p.parseSubscribed()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	p.next()
	if len(args) == 1 {
		return &getitemExpr{p: t.p, obj: x, key: args[0]}, nil
	}
	return &getitemExpr{p: t.p, obj: x, key: &tupleExpr{p: t.p, items: args}}, nil
}

func (p *parser) parseSubscribed() (expr, error) {
	start := p.cur()
	var parts []expr
	if p.skipOp(":") {
		parts = []expr{nil}
	} else {
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.skipOp(":") {
			return x, nil
		}
		parts = []expr{x}
	}
	if p.isOp(":") {
		parts = append(parts, nil)
	} else if !p.isOp("]") && !p.isOp(",") {
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		parts = append(parts, x)
	} else {
		parts = append(parts, nil)
	}
	if p.skipOp(":") {
		if !p.isOp("]") && !p.isOp(",") {
			x, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			parts = append(parts, x)
		} else {
			parts = append(parts, nil)
		}
	} else {
		parts = append(parts, nil)
	}
	return &sliceExpr{p: start.p, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

func (p *parser) parseCallArgs() (callArgs, error) {
	open, err := p.expectOp("(")
	if err != nil {
		return callArgs{}, err
	}
	var a callArgs
	requireComma := false
	invalid := func() error { return p.fail(open, "invalid syntax for function call expression") }
	for !p.isOp(")") {
		if requireComma {
			if _, err := p.expectOp(","); err != nil {
				return callArgs{}, err
			}
			if p.isOp(")") {
				break
			}
		}
		switch {
		case p.isOp("*"):
			if a.dynArgs != nil || a.dynKwargs != nil {
				return callArgs{}, invalid()
			}
			p.next()
			if a.dynArgs, err = p.parseExpression(true); err != nil {
				return callArgs{}, err
			}
		case p.isOp("**"):
			if a.dynKwargs != nil {
				return callArgs{}, invalid()
			}
			p.next()
			if a.dynKwargs, err = p.parseExpression(true); err != nil {
				return callArgs{}, err
			}
		case p.cur().kind == tokName && p.look().kind == tokOp && p.look().val == "=":
			if a.dynKwargs != nil {
				return callArgs{}, invalid()
			}
			key := p.next().val
			p.next()
			v, err := p.parseExpression(true)
			if err != nil {
				return callArgs{}, err
			}
			a.kwargs = append(a.kwargs, kwargExpr{name: key, val: v})
		default:
			if a.dynArgs != nil || a.dynKwargs != nil || len(a.kwargs) > 0 {
				return callArgs{}, invalid()
			}
			v, err := p.parseExpression(true)
			if err != nil {
				return callArgs{}, err
			}
			a.args = append(a.args, v)
		}
		requireComma = true
	}
	p.next()
	return a, nil
}

func (p *parser) parseCall(x expr) (expr, error) {
	t := p.cur()
	a, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{p: t.p, fn: x, callArgs: a}, nil
}

func (p *parser) dottedName() (token, string, error) {
	t, err := p.expectName()
	if err != nil {
		return t, "", err
	}
	name := t.val
	for p.isOp(".") {
		p.next()
		n, err := p.expectName()
		if err != nil {
			return t, "", err
		}
		name += "." + n.val
	}
	return t, name, nil
}

// parseFilter parses "|name(args)" chains; startInline parses the first
// filter without its pipe, as {% filter %} writes it.
func (p *parser) parseFilter(x expr, startInline bool) (expr, error) {
	for p.isOp("|") || startInline {
		if !startInline {
			p.next()
		}
		startInline = false
		t, name, err := p.dottedName()
		if err != nil {
			return nil, err
		}
		if _, ok := filters[name]; !ok && !p.soft {
			return nil, p.fail(t, "No filter named '%s'.", name)
		}
		f := &filterExpr{p: t.p, obj: x, name: name, soft: p.soft}
		if p.isOp("(") {
			if f.callArgs, err = p.parseCallArgs(); err != nil {
				return nil, err
			}
		}
		x = f
	}
	return x, nil
}

func (p *parser) parseTest(x expr) (expr, error) {
	is := p.next()
	negated := p.skipName("not")
	t, name, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	if _, ok := tests[name]; !ok && !p.soft {
		return nil, p.fail(t, "No test named '%s'.", name)
	}
	te := &testExpr{p: t.p, obj: x, name: name, soft: p.soft}
	c := p.cur()
	switch {
	case p.isOp("("):
		if te.callArgs, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	case (c.kind == tokName || c.kind == tokString || c.kind == tokInt || c.kind == tokFloat ||
		(c.kind == tokOp && (c.val == "(" || c.val == "[" || c.val == "{"))) &&
		!(c.kind == tokName && (c.val == "else" || c.val == "or" || c.val == "and")):
		if c.kind == tokName && c.val == "is" {
			return nil, p.fail(c, "You cannot chain multiple tests with is")
		}
		arg, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if arg, err = p.parsePostfix(arg); err != nil {
			return nil, err
		}
		te.args = []expr{arg}
	}
	if negated {
		return &unaryExpr{p: is.p, op: "not", x: te}, nil
	}
	return te, nil
}
