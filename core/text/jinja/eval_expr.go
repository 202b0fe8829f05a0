package jinja

import (
	"errors"
)

// Expression evaluation, calls and slices.

func (r *renderer) eval(e expr, sc *scope) (Value, error) {
	switch e := e.(type) {
	case *constExpr:
		return e.v, nil
	case *nameExpr:
		if v, ok := sc.lookup(e.name); ok {
			return v, nil
		}
		if v, ok := r.vars[e.name]; ok {
			return v, nil
		}
		if v, ok := globals[e.name]; ok {
			return v, nil
		}
		return undefinedName(e.name), nil
	case *tupleExpr:
		items := make([]Value, len(e.items))
		for i, it := range e.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		return &List{Items: items, Tuple: true}, nil
	case *listExpr:
		items := make([]Value, len(e.items))
		for i, it := range e.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		return &List{Items: items}, nil
	case *dictExpr:
		d := NewDict(len(e.keys))
		for i := range e.keys {
			k, err := r.eval(e.keys[i], sc)
			if err != nil {
				return nil, err
			}
			if _, ok := hashKey(k); !ok {
				return nil, typeErr("unhashable type: '%s'", typeName(k))
			}
			v, err := r.eval(e.vals[i], sc)
			if err != nil {
				return nil, err
			}
			d.Set(k, v)
		}
		return d, nil
	case *getattrExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		return getattr(obj, e.attr)
	case *getitemExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		if s, ok := e.arg.(*sliceExpr); ok {
			return r.evalSlice(obj, s, sc)
		}
		arg, err := r.eval(e.arg, sc)
		if err != nil {
			return nil, err
		}
		return getitem(obj, arg)
	case *callExpr:
		return r.evalCall(e, sc, nil)
	case *filterExpr:
		v, err := r.eval(e.node, sc)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(e, v, sc)
	case *testExpr:
		return r.applyTest(e, sc)
	case *notExpr:
		v, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		return !truthy(v), nil
	case *negExpr:
		v, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		return neg(v)
	case *posExpr:
		v, err := r.eval(e.x, sc)
		if err != nil {
			return nil, err
		}
		switch v.(type) {
		case int64, float64:
			return v, nil
		case bool:
			return toInt(v), nil
		case Undefined:
			return nil, v.(Undefined).err()
		}
		return nil, typeErr("bad operand type for unary +: '%s'", typeName(v))
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
		return r.binop(e.op, l, rv)
	case *compareExpr:
		l, err := r.eval(e.first, sc)
		if err != nil {
			return nil, err
		}
		for i, op := range e.ops {
			rv, err := r.eval(e.rest[i], sc)
			if err != nil {
				return nil, err
			}
			ok, err := r.compare(op, l, rv)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			l = rv
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
			return Undefined{hint: "the inline if-expression evaluated to false and no else section was defined."}, nil
		}
		return r.eval(e.else_, sc)
	}
	return nil, errors.New("BUG: jinja: unknown expression")
}

func (r *renderer) evalArgs(args []expr, kws []kwarg, sc *scope) ([]Value, *Dict, error) {
	var vals []Value
	if len(args) > 0 {
		vals = make([]Value, len(args))
		for i, a := range args {
			v, err := r.eval(a, sc)
			if err != nil {
				return nil, nil, err
			}
			vals[i] = v
		}
	}
	var kw *Dict
	if len(kws) > 0 {
		kw = NewDict(len(kws))
		for _, k := range kws {
			v, err := r.eval(k.val, sc)
			if err != nil {
				return nil, nil, err
			}
			kw.Set(k.name, v)
		}
	}
	return vals, kw, nil
}

func (r *renderer) evalCall(c *callExpr, sc *scope, caller *macro) (Value, error) {
	fn, err := r.eval(c.fn, sc)
	if err != nil {
		return nil, err
	}
	args, kw, err := r.evalArgs(c.args, c.kwargs, sc)
	if err != nil {
		return nil, err
	}
	return r.call(fn, args, kw, caller)
}

func (r *renderer) call(fn Value, args []Value, kw *Dict, caller *macro) (Value, error) {
	switch f := fn.(type) {
	case *macro:
		return r.callMacro(f, args, kw, caller)
	case *Func:
		if err := r.step(1); err != nil {
			return nil, err
		}
		return f.Call(r, args, kw)
	case Undefined:
		return nil, f.err()
	}
	return nil, typeErr("'%s' object is not callable", typeName(fn))
}

func (r *renderer) evalSlice(obj Value, s *sliceExpr, sc *scope) (Value, error) {
	var bounds [3]Value
	for i, e := range []expr{s.start, s.stop, s.step} {
		if e == nil {
			continue
		}
		v, err := r.eval(e, sc)
		if err != nil {
			return nil, err
		}
		bounds[i] = v
	}
	return slice(obj, bounds[0], bounds[1], bounds[2])
}
