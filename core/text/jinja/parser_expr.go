package jinja

import (
	"math"
	"strconv"
)

// Expressions: tuples, conditionals, operators by precedence, primaries, subscripts, calls and filters.

// parseTuple is jinja2's parse_tuple: an expression, or a tuple of them
// without parentheses. withCond false parses no ternary (a for loop's
// iterable, whose "if" filters; an if's condition, as jinja2).
func (p *parser) parseTuple(withCond bool) (expr, error) {
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			isTuple = true
		}
		if p.tupleEnds() {
			break
		}
		e, err := p.parseExpr(withCond)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	if !isTuple {
		if len(items) == 0 {
			return nil, p.errf("expected an expression, got %s", describe(p.cur()))
		}
		return items[0], nil
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) tupleEnds() bool {
	t := p.cur()
	switch t.kind {
	case tVarEnd, tBlockEnd, tEOF:
		return true
	case tOp:
		return t.val == ")" || t.val == "]" || t.val == "}" || t.val == "="
	case tName:
		return t.val == "in" || t.val == "if" || t.val == "recursive"
	}
	return false
}

func (p *parser) parseExpr(withCond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	if !withCond {
		return p.parseOr()
	}
	return p.parseCond()
}

func (p *parser) parseCond() (expr, error) {
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		test, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var els expr
		if p.skipName("else") {
			if els, err = p.parseExpr(true); err != nil {
				return nil, err
			}
		}
		e = &condExpr{test: test, then: e, else_: els}
	}
	return e, nil
}

func (p *parser) parseOr() (expr, error) { return p.parseKeyword("or", p.parseAnd) }

func (p *parser) parseAnd() (expr, error) { return p.parseKeyword("and", p.parseNot) }

// parseKeyword parses sub (kw sub)*, left-associative: the keyword
// operators or and and.
func (p *parser) parseKeyword(kw string, sub func() (expr, error)) (expr, error) {
	l, err := sub()
	if err != nil {
		return nil, err
	}
	for p.skipName(kw) {
		r, err := sub()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: kw, l: l, r: r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		p.next()
		if err := p.enter(); err != nil {
			return nil, err
		}
		defer p.leave()
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &notExpr{x: x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{first: first}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.next()
		case t.kind == tName && t.val == "in":
			op = "in"
			p.next()
		case t.kind == tName && t.val == "not" && p.peek().kind == tName && p.peek().val == "in":
			op = "notin"
			p.next()
			p.next()
		}
		if op == "" {
			break
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
	if len(c.ops) == 0 {
		return first, nil
	}
	return c, nil
}

func (p *parser) parseBinary(ops []string, sub func() (expr, error)) (expr, error) {
	l, err := sub()
	if err != nil {
		return nil, err
	}
	for {
		t := p.cur()
		found := ""
		if t.kind == tOp {
			for _, o := range ops {
				if t.val == o {
					found = o
				}
			}
		}
		if found == "" {
			return l, nil
		}
		p.next()
		r, err := sub()
		if err != nil {
			return nil, err
		}
		l = &binExpr{op: found, l: l, r: r}
	}
}

func (p *parser) parseMath1() (expr, error) {
	return p.parseBinary([]string{"+", "-"}, p.parseConcat)
}

func (p *parser) parseConcat() (expr, error) {
	return p.parseBinary([]string{"~"}, p.parseMath2)
}

func (p *parser) parseMath2() (expr, error) {
	return p.parseBinary([]string{"*", "/", "//", "%"}, p.parsePow)
}

func (p *parser) parsePow() (expr, error) {
	return p.parseBinary([]string{"**"}, func() (expr, error) { return p.parseUnary(true) })
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer p.leave()
	var e expr
	var err error
	switch {
	case p.isOp("-"):
		p.next()
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &negExpr{x: x}
	case p.isOp("+"):
		p.next()
		x, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		e = &posExpr{x: x}
	default:
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	switch t.kind {
	case tName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{v: true}, nil
		case "false", "False":
			return &constExpr{v: false}, nil
		case "none", "None":
			return &constExpr{v: nil}, nil
		}
		return &nameExpr{name: t.val, line: t.line}, nil
	case tString:
		p.next()
		s := t.val
		for p.cur().kind == tString { // adjacent literals concatenate
			s += p.next().val
		}
		return &constExpr{v: s}, nil
	case tInt:
		p.next()
		v, err := strconv.ParseInt(t.val, 0, 64)
		if err != nil {
			return nil, syntaxErr(t.line, "integer %s out of range", t.val)
		}
		return &constExpr{v: v}, nil
	case tFloat:
		p.next()
		v, err := strconv.ParseFloat(t.val, 64)
		if err != nil && !math.IsInf(v, 0) {
			return nil, syntaxErr(t.line, "bad float %s", t.val)
		}
		return &constExpr{v: v}, nil
	case tOp:
		switch t.val {
		case "(":
			p.next()
			if p.skipOp(")") {
				return &tupleExpr{}, nil
			}
			e, err := p.parseTuple(true)
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{}
			err := p.commaList("]", func() error {
				e, err := p.parseExpr(true)
				l.items = append(l.items, e)
				return err
			})
			return l, err
		case "{":
			p.next()
			d := &dictExpr{}
			err := p.commaList("}", func() error {
				k, err := p.parseExpr(true)
				if err != nil {
					return err
				}
				if err := p.expectOp(":"); err != nil {
					return err
				}
				v, err := p.parseExpr(true)
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
				return err
			})
			return d, err
		}
	}
	return nil, p.errf("unexpected %s", describe(t))
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		if err := p.enter(); err != nil {
			return nil, err
		}
		p.leave()
		switch {
		case p.isOp("."):
			p.next()
			t := p.cur()
			switch t.kind {
			case tName:
				p.next()
				e = &getattrExpr{obj: e, attr: t.val}
			case tInt:
				p.next()
				v, err := strconv.ParseInt(t.val, 0, 64)
				if err != nil {
					return nil, syntaxErr(t.line, "integer %s out of range", t.val)
				}
				e = &getitemExpr{obj: e, arg: &constExpr{v: v}}
			default:
				return nil, p.errf("expected name or number")
			}
		case p.isOp("["):
			p.next()
			var args []expr
			if err := p.commaList("]", func() error {
				a, err := p.parseSubscript()
				args = append(args, a)
				return err
			}); err != nil {
				return nil, err
			}
			switch len(args) {
			case 0:
				return nil, p.errf("expected subscript")
			case 1:
				e = &getitemExpr{obj: e, arg: args[0]}
			default:
				e = &getitemExpr{obj: e, arg: &tupleExpr{items: args}}
			}
		case p.isOp("("):
			c, err := p.parseCall(e)
			if err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

func (p *parser) parseSubscript() (expr, error) {
	var start expr
	var err error
	if !p.isOp(":") {
		if start, err = p.parseExpr(true); err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return start, nil
		}
	}
	p.next()
	s := &sliceExpr{start: start}
	if !p.isOp("]") && !p.isOp(",") && !p.isOp(":") {
		if s.stop, err = p.parseExpr(true); err != nil {
			return nil, err
		}
	}
	if p.skipOp(":") {
		if !p.isOp("]") && !p.isOp(",") {
			if s.step, err = p.parseExpr(true); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

func (p *parser) parseArgs() ([]expr, []kwarg, error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	var args []expr
	var kws []kwarg
	err := p.commaList(")", func() error {
		if p.isOp("*") || p.isOp("**") {
			return p.errf("*args and **kwargs in calls are not supported")
		}
		if p.cur().kind == tName && p.peek().kind == tOp && p.peek().val == "=" {
			name := p.next().val
			p.next()
			v, err := p.parseExpr(true)
			kws = append(kws, kwarg{name: name, val: v})
			return err
		}
		if len(kws) > 0 {
			return p.errf("invalid syntax for function call expression")
		}
		a, err := p.parseExpr(true)
		args = append(args, a)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return args, kws, nil
}

// commaList parses item after item, separated by commas, up to the
// operator close (a trailing comma allowed, as Jinja's parser allows
// it), and consumes close. item parses one at the current token.
func (p *parser) commaList(close string, item func() error) error {
	for n := 0; !p.isOp(close); n++ {
		if n > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
			if p.isOp(close) {
				break
			}
		}
		if err := item(); err != nil {
			return err
		}
	}
	p.next()
	return nil
}

func (p *parser) parseCall(fn expr) (*callExpr, error) {
	args, kws, err := p.parseArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{fn: fn, args: args, kwargs: kws}, nil
}

// parseFilter parses a filter's name and arguments after its "|".
func (p *parser) parseFilter(node expr) (*filterExpr, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.next()
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n
	}
	f := &filterExpr{node: node, name: name}
	if p.isOp("(") {
		if f.args, f.kwargs, err = p.parseArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseFilterExpr(e expr) (expr, error) {
	for {
		if err := p.enter(); err != nil {
			return nil, err
		}
		p.leave()
		switch {
		case p.isOp("|"):
			p.next()
			f, err := p.parseFilter(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.isName("is"):
			p.next()
			negated := p.skipName("not")
			name, err := p.expectName()
			if err != nil {
				return nil, err
			}
			for p.isOp(".") {
				p.next()
				n, err := p.expectName()
				if err != nil {
					return nil, err
				}
				name += "." + n
			}
			te := &testExpr{node: e, name: name}
			t := p.cur()
			switch {
			case p.isOp("("):
				if te.args, te.kwargs, err = p.parseArgs(); err != nil {
					return nil, err
				}
			case (t.kind == tName && t.val != "else" && t.val != "or" && t.val != "and") || t.kind == tString || t.kind == tInt || t.kind == tFloat || (t.kind == tOp && (t.val == "[" || t.val == "{")):
				if t.kind == tName && t.val == "is" {
					return nil, p.errf("You cannot chain multiple tests with is")
				}
				a, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				if a, err = p.parsePostfix(a); err != nil {
					return nil, err
				}
				te.args = []expr{a}
			}
			e = te
			if negated {
				e = &notExpr{x: e}
			}
		case p.isOp("("):
			c, err := p.parseCall(e)
			if err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}
