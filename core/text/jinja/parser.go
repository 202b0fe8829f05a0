package jinja

import ()

// The parser: jinja2.parser.Parser's grammar for expressions and the
// statements of the subset (if, for, set, macro, call, filter, break,
// continue, and transformers' generation block):
//
//	expr     = or ["if" or ["else" expr]]
//	or       = and {"or" and}
//	and      = not {"and" not}
//	not      = "not" not | compare
//	compare  = math1 {("=="|"!="|"<"|"<="|">"|">="|"in"|"not" "in") math1}
//	math1    = concat {("+"|"-") concat}
//	concat   = math2 {"~" math2}
//	math2    = pow {("*"|"/"|"//"|"%") pow}
//	pow      = unary {"**" unary}            (left-associative, as jinja2)
//	unary    = ("-"|"+") unary-without-filter | primary; postfix; filters
//
// Invariant: nesting is at most maxNesting deep, so that hostile input
// cannot exhaust the stack.

type parser struct {
	toks  []token
	pos   int
	depth int
}

func (p *parser) cur() token  { return p.toks[p.pos] }
func (p *parser) peek() token { return p.toks[min(p.pos+1, len(p.toks)-1)] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 {
		p.pos++
	}
	return t
}

func (p *parser) errf(format string, args ...any) error {
	return syntaxErr(p.cur().line, format, args...)
}

func (p *parser) isOp(op string) bool { t := p.cur(); return t.kind == tOp && t.val == op }
func (p *parser) isName(n string) bool {
	t := p.cur()
	return t.kind == tName && t.val == n
}

func (p *parser) skipOp(op string) bool {
	if p.isOp(op) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(n string) bool {
	if p.isName(n) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.skipOp(op) {
		return p.errf("expected '%s', got %s", op, describe(p.cur()))
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tName {
		return "", p.errf("expected name, got %s", describe(t))
	}
	p.next()
	return t.val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tBlockEnd {
		return p.errf("expected end of statement block, got %s", describe(p.cur()))
	}
	p.next()
	return nil
}

func describe(t token) string {
	switch t.kind {
	case tEOF:
		return "end of template"
	case tBlockEnd:
		return "end of statement block"
	case tVarEnd:
		return "end of print statement"
	case tData:
		return "template data"
	}
	return "'" + t.val + "'"
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return p.errf("nesting deeper than %d", maxNesting)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parseTemplate parses the whole token stream.
func (p *parser) parseTemplate() ([]node, error) {
	body, end, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errf("unexpected '%s'", end)
	}
	return body, nil
}

// subparse parses nodes until a block tag whose first name is one of
// ends (left unconsumed after the name: the caller reads the rest), or
// the end of the template (end "").
func (p *parser) subparse(ends []string) ([]node, string, error) {
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	defer p.leave()
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if len(ends) > 0 {
				return nil, "", p.errf("unexpected end of template, expected '%s'", ends[0])
			}
			return body, "", nil
		case tData:
			p.next()
			body = append(body, &dataNode{text: t.val})
		case tVarBegin:
			p.next()
			e, err := p.parseTuple(true)
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tVarEnd {
				return nil, "", p.errf("expected end of print statement, got %s", describe(p.cur()))
			}
			p.next()
			body = append(body, &outputNode{expr: e})
		case tBlockBegin:
			p.next()
			nt := p.cur()
			if nt.kind != tName {
				return nil, "", p.errf("tag name expected")
			}
			for _, e := range ends {
				if nt.val == e {
					p.next()
					return body, e, nil
				}
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			body = append(body, n)
		default:
			return nil, "", p.errf("unexpected %s", describe(t))
		}
	}
}

// body parses statements up to one of ends and its block end; it
// returns the end found.
func (p *parser) body(ends ...string) ([]node, string, error) {
	b, end, err := p.subparse(ends)
	if err != nil {
		return nil, "", err
	}
	return b, end, nil
}

func (p *parser) parseStatement() (node, error) {
	t := p.next()
	switch t.val {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(t.line)
	case "set":
		return p.parseSet(t.line)
	case "macro":
		return p.parseMacro()
	case "call":
		return p.parseCallBlock()
	case "filter":
		return p.parseFilterBlock()
	case "break", "continue":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if t.val == "break" {
			return &breakNode{}, nil
		}
		return &continueNode{}, nil
	case "generation":
		// transformers' AssistantTracker: the body renders as it is
		// (the indices it tracks are not rendered text).
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		b, _, err := p.body("endgeneration")
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		return &ifNode{cond: &constExpr{v: true}, body: b}, nil
	}
	return nil, syntaxErr(t.line, "encountered unknown tag '%s'", t.val)
}

func (p *parser) parseIf() (node, error) {
	cond, err := p.parseTuple(false)
	if err != nil {
		return nil, err
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	n := &ifNode{cond: cond}
	b, end, err := p.body("elif", "else", "endif")
	if err != nil {
		return nil, err
	}
	n.body = b
	switch end {
	case "elif":
		inner, err := p.parseIf()
		if err != nil {
			return nil, err
		}
		n.else_ = []node{inner}
		return n, nil
	case "else":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.else_, _, err = p.body("endif"); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseFor(line int) (node, error) {
	target, err := p.parseAssignTarget(false)
	if err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.errf("expected 'in', got %s", describe(p.cur()))
	}
	iter, err := p.parseTuple(false)
	if err != nil {
		return nil, err
	}
	n := &forNode{target: target, iter: iter, line: line}
	if p.skipName("if") {
		if n.filter, err = p.parseExpr(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.errf("recursive for loops are not supported")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	b, end, err := p.body("endfor", "else")
	if err != nil {
		return nil, err
	}
	n.body = b
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.else_, _, err = p.body("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet(line int) (node, error) {
	target, err := p.parseAssignTarget(true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		v, err := p.parseTuple(true)
		if err != nil {
			return nil, err
		}
		return &setNode{target: target, value: v, line: line}, p.expectBlockEnd()
	}
	n := &setBlockNode{target: target}
	for p.skipOp("|") {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.body("endset"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

// parseAssignTarget: a name, ns.attr (withNS), or a tuple of names.
func (p *parser) parseAssignTarget(withNS bool) (expr, error) {
	if withNS && p.cur().kind == tName && p.peek().kind == tOp && p.peek().val == "." {
		ns := p.next().val
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return nil, err
		}
		return &nsRefExpr{name: ns, attr: attr}, nil
	}
	var items []expr
	paren := p.skipOp("(")
	for {
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		if n == "true" || n == "false" || n == "none" || n == "True" || n == "False" || n == "None" {
			return nil, p.errf("can't assign to %s", n)
		}
		items = append(items, &nameExpr{name: n, line: p.cur().line})
		if !p.skipOp(",") {
			break
		}
		if !paren && (p.isName("in") || p.isOp("=") || p.cur().kind == tBlockEnd) {
			break
		}
		if paren && p.isOp(")") {
			break
		}
	}
	if paren {
		if err := p.expectOp(")"); err != nil {
			return nil, err
		}
		return &tupleExpr{items: items}, nil
	}
	if len(items) == 1 && !(p.toks[p.pos-1].kind == tOp && p.toks[p.pos-1].val == ",") {
		return items[0], nil
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) parseParams() ([]string, []expr, error) {
	var names []string
	var defs []expr
	if err := p.expectOp("("); err != nil {
		return nil, nil, err
	}
	if err := p.commaList(")", func() error {
		n, err := p.expectName()
		if err != nil {
			return err
		}
		names = append(names, n)
		if p.skipOp("=") {
			d, err := p.parseExpr(true)
			defs = append(defs, d)
			return err
		} else if len(defs) > 0 {
			return p.errf("non-default argument follows default argument")
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}
	return names, defs, nil
}

func (p *parser) parseMacro() (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	params, defs, err := p.parseParams()
	if err != nil {
		return nil, err
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	b, _, err := p.body("endmacro")
	if err != nil {
		return nil, err
	}
	if p.cur().kind == tName { // {% endmacro name %}
		p.next()
	}
	return &macroNode{name: name, params: params, defaults: defs, body: b}, p.expectBlockEnd()
}

func (p *parser) parseCallBlock() (node, error) {
	n := &callBlockNode{}
	var err error
	if p.isOp("(") {
		if n.params, n.defaults, err = p.parseParams(); err != nil {
			return nil, err
		}
	}
	e, err := p.parseExpr(true)
	if err != nil {
		return nil, err
	}
	c, ok := e.(*callExpr)
	if !ok {
		return nil, p.errf("expected call")
	}
	n.call = c
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.body("endcall"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseFilterBlock() (node, error) {
	n := &filterBlockNode{}
	for {
		f, err := p.parseFilter(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
		if !p.skipOp("|") {
			break
		}
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	var err error
	if n.body, _, err = p.body("endfilter"); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}
