package jinja

import (
	"errors"
	"strings"
)

// The renderer walks the tree. Scoping is jinja2's: a for loop's body
// and a macro's body are scopes of their own (a set inside them is gone
// after the iteration or call; hence namespace()); if and the template
// body are not. Each loop iteration starts from a fresh scope, as
// jinja2's compiled loop body does.

type renderer struct {
	vars  map[string]Value
	out   *strings.Builder
	steps int
	alloc int
	depth int
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// scope holds the names set in one block; names are few, so a slice.
type scope struct {
	parent *scope
	names  []string
	vals   []Value
}

func (s *scope) lookup(name string) (Value, bool) {
	for ; s != nil; s = s.parent {
		for i := len(s.names) - 1; i >= 0; i-- {
			if s.names[i] == name {
				return s.vals[i], true
			}
		}
	}
	return nil, false
}

func (s *scope) set(name string, v Value) {
	for i, n := range s.names {
		if n == name {
			s.vals[i] = v
			return
		}
	}
	s.names = append(s.names, name)
	s.vals = append(s.vals, v)
}

func (r *renderer) step(n int) error {
	r.steps += n
	if r.steps > MaxSteps {
		return &limitError{what: "more than MaxSteps loop iterations, calls and items"}
	}
	return nil
}

// charge accounts n bytes built; a value over MaxOutput is refused.
func (r *renderer) charge(n int) error {
	if n > MaxOutput {
		return &limitError{what: "a value or the output over MaxOutput bytes"}
	}
	r.alloc += n
	if r.alloc > MaxAlloc {
		return &limitError{what: "more than MaxAlloc bytes built"}
	}
	return nil
}

func (r *renderer) write(s string) error {
	if err := r.charge(len(s)); err != nil {
		return err
	}
	if r.out.Len()+len(s) > MaxOutput {
		return &limitError{what: "output over MaxOutput bytes"}
	}
	r.out.WriteString(s)
	return nil
}

// capture renders body into a string of its own.
func (r *renderer) capture(body []node, sc *scope) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := r.block(body, sc)
	r.out = saved
	return b.String(), err
}

func (r *renderer) block(body []node, sc *scope) error {
	for _, n := range body {
		if err := r.exec(n, sc); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) exec(n node, sc *scope) error {
	switch n := n.(type) {
	case *dataNode:
		return r.write(n.text)
	case *outputNode:
		v, err := r.eval(n.expr, sc)
		if err != nil {
			return err
		}
		return r.write(toStr(v))
	case *ifNode:
		v, err := r.eval(n.cond, sc)
		if err != nil {
			return err
		}
		if truthy(v) {
			return r.block(n.body, sc)
		}
		return r.block(n.else_, sc)
	case *forNode:
		return r.execFor(n, sc)
	case *setNode:
		v, err := r.eval(n.value, sc)
		if err != nil {
			return err
		}
		return r.assign(n.target, v, sc)
	case *setBlockNode:
		s, err := r.capture(n.body, sc)
		if err != nil {
			return err
		}
		var v Value = s
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
		return r.assign(n.target, v, sc)
	case *macroNode:
		sc.set(n.name, &macro{name: n.name, params: n.params, defaults: n.defaults, body: n.body, closure: sc})
		return nil
	case *callBlockNode:
		caller := &macro{name: "caller", params: n.params, defaults: n.defaults, body: n.body, closure: sc}
		v, err := r.evalCall(n.call, sc, caller)
		if err != nil {
			return err
		}
		return r.write(toStr(v))
	case *filterBlockNode:
		s, err := r.capture(n.body, sc)
		if err != nil {
			return err
		}
		var v Value = s
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
		return r.write(toStr(v))
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	}
	return errors.New("BUG: jinja: unknown node")
}

func (r *renderer) assign(target expr, v Value, sc *scope) error {
	switch t := target.(type) {
	case *nameExpr:
		sc.set(t.name, v)
		return nil
	case *nsRefExpr:
		nv, ok := sc.lookup(t.name)
		if !ok {
			nv, ok = r.vars[t.name]
		}
		ns, isNS := nv.(*Namespace)
		if !ok || !isNS {
			return &RenderError{Kind: "TemplateRuntimeError", Msg: "cannot assign attribute on non-namespace object"}
		}
		ns.attrs.Set(t.attr, v)
		return nil
	case *tupleExpr:
		items, err := r.iterate(v)
		if err != nil {
			return err
		}
		if len(items) != len(t.items) {
			if len(items) > len(t.items) {
				return valueErr("too many values to unpack (expected %d)", len(t.items))
			}
			return valueErr("not enough values to unpack (expected %d, got %d)", len(t.items), len(items))
		}
		for i, it := range t.items {
			if err := r.assign(it, items[i], sc); err != nil {
				return err
			}
		}
		return nil
	}
	return errors.New("BUG: jinja: bad assignment target")
}

// loopObj is jinja2's LoopContext for one iteration.
type loopObj struct {
	items  []Value
	index0 int
}

func (r *renderer) execFor(n *forNode, sc *scope) error {
	iv, err := r.eval(n.iter, sc)
	if err != nil {
		return err
	}
	items, err := r.iterate(iv)
	if err != nil {
		return err
	}
	if n.filter != nil {
		// The loop filter runs before the body, over every item, with the
		// target bound: loop.length counts the items it keeps.
		kept := make([]Value, 0, len(items))
		for _, it := range items {
			if err := r.step(1); err != nil {
				return err
			}
			fs := &scope{parent: sc}
			if err := r.assign(n.target, it, fs); err != nil {
				return err
			}
			ok, err := r.eval(n.filter, fs)
			if err != nil {
				return err
			}
			if truthy(ok) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.block(n.else_, sc)
	}
	it := &scope{parent: sc}
	for i, v := range items {
		if err := r.step(1); err != nil {
			return err
		}
		it.names, it.vals = it.names[:0], it.vals[:0]
		it.set("loop", &loopObj{items: items, index0: i})
		if err := r.assign(n.target, v, it); err != nil {
			return err
		}
		err := r.block(n.body, it)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
		// A macro defined in the body keeps this iteration's scope.
		if len(it.names) > 0 && hasMacro(it) {
			it = &scope{parent: sc}
		}
	}
	return nil
}

func hasMacro(s *scope) bool {
	for _, v := range s.vals {
		if _, ok := v.(*macro); ok {
			return true
		}
	}
	return false
}

// iterate is the items "for" visits: a list's or tuple's items, a
// dict's keys, a string's characters; undefined is empty.
func (r *renderer) iterate(v Value) ([]Value, error) {
	switch v := v.(type) {
	case *List:
		return v.Items, nil
	case *Dict:
		return v.keys, nil
	case *iterVal:
		return v.drain(), nil
	case string:
		if err := r.step(len(v)); err != nil {
			return nil, err
		}
		out := make([]Value, 0, len(v))
		for _, c := range v {
			out = append(out, string(c))
		}
		return out, nil
	case Undefined:
		if v.kind != "" {
			return nil, v.err()
		}
		return nil, nil
	case *Namespace:
		return nil, typeErr("'Namespace' object is not iterable")
	}
	return nil, typeErr("'%s' object is not iterable", typeName(v))
}

// macro is a {% macro %} or a call block's caller.
type macro struct {
	name     string
	params   []string
	defaults []expr
	body     []node
	closure  *scope
}

func (r *renderer) callMacro(m *macro, args []Value, kw *Dict, caller *macro) (Value, error) {
	if err := r.step(1); err != nil {
		return nil, err
	}
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > MaxDepth {
		return nil, &limitError{what: "macro calls nested deeper than MaxDepth"}
	}
	sc := &scope{parent: m.closure}
	if len(args) > len(m.params) {
		return nil, typeErr("macro '%s' takes not more than %d argument(s)", m.name, len(m.params))
	}
	firstDefault := len(m.params) - len(m.defaults)
	for i, p := range m.params {
		var v Value
		found := false
		if i < len(args) {
			v, found = args[i], true
		}
		if kv, ok := kwGet(kw, p); ok {
			if found {
				return nil, typeErr("macro '%s' got multiple values for argument '%s'", m.name, p)
			}
			v, found = kv, true
		}
		if !found {
			if i >= firstDefault {
				dv, err := r.eval(m.defaults[i-firstDefault], sc)
				if err != nil {
					return nil, err
				}
				v = dv
			} else {
				v = Undefined{hint: "parameter '" + p + "' was not provided"}
			}
		}
		sc.set(p, v)
	}
	if kw != nil {
		for _, k := range kw.keys {
			ks, _ := k.(string)
			if !containsStr(m.params, ks) {
				return nil, typeErr("macro '%s' takes no keyword argument '%s'", m.name, ks)
			}
		}
	}
	if caller != nil {
		sc.set("caller", caller)
	}
	s, err := r.capture(m.body, sc)
	if err != nil {
		return nil, err
	}
	return s, nil
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func kwGet(kw *Dict, name string) (Value, bool) {
	if kw == nil {
		return nil, false
	}
	return kw.Get(name)
}
