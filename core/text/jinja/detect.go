package jinja

// ContentFormat is vLLM's detection of the message content format a
// template expects (vllm-project/vllm: vllm/entrypoints/chat_utils.py,
// _detect_content_format), on this package's tree, which has jinja2's
// shapes:
//
//  1. the names bound to messages: "messages", then, breadth first, the
//     target of every {% set x = expr %} whose expr reads one of them
//     (a name, through filters, tests and slices);
//  2. the targets of every for loop (in document order, macros
//     included) over one of those;
//  3. "openai" if some for loop iterates over target.content or
//     target['content'] (through filters, tests and slices) of one of
//     those, else "string".
//
// Where vLLM's walk asserts a plain-name target and a template has
// another (a namespace attribute or a tuple), vLLM's exception makes it
// fall back to "string"; so does this.
func (t *Template) ContentFormat() string {
	var sets []*setNode
	var fors []*forNode
	walk(t.body, func(n node) {
		switch n := n.(type) {
		case *setNode:
			sets = append(sets, n)
		case *forNode:
			fors = append(fors, n)
		}
	})
	msgNames := []string{"messages"}
	queue := []string{"messages"}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, s := range sets {
			if !varAccess(s.value, v, "") {
				continue
			}
			name, ok := s.target.(*nameExpr)
			if !ok {
				return "string"
			}
			msgNames = append(msgNames, name.name)
			if name.name != v {
				queue = append(queue, name.name)
			}
		}
	}
	var itemNames []string
	for _, f := range fors {
		for _, v := range msgNames {
			if varAccess(f.iter, v, "") {
				name, ok := f.target.(*nameExpr)
				if !ok {
					return "string"
				}
				itemNames = append(itemNames, name.name)
				break
			}
		}
	}
	for _, f := range fors {
		for _, v := range itemNames {
			if varAccess(f.iter, v, "content") {
				if _, ok := f.target.(*nameExpr); !ok {
					return "string"
				}
				return "openai"
			}
		}
	}
	return "string"
}

// varAccess is vLLM's _is_var_or_elems_access: e reads the name v (key
// "") or v.key / v['key'], through filters, tests and slices.
func varAccess(e expr, v, key string) bool {
	switch x := e.(type) {
	case *filterExpr:
		return x.node != nil && varAccess(x.node, v, key)
	case *testExpr:
		return varAccess(x.node, v, key)
	case *getitemExpr:
		if _, ok := x.arg.(*sliceExpr); ok {
			return varAccess(x.obj, v, key)
		}
		if key == "" {
			return false
		}
		c, ok := x.arg.(*constExpr)
		n, isName := x.obj.(*nameExpr)
		return ok && isName && n.name == v && c.v == key
	case *getattrExpr:
		n, isName := x.obj.(*nameExpr)
		return key != "" && isName && n.name == v && x.attr == key
	case *nameExpr:
		return key == "" && x.name == v
	}
	return false
}

// walk visits every statement in document order, pre-order.
func walk(body []node, f func(node)) {
	for _, n := range body {
		f(n)
		switch n := n.(type) {
		case *ifNode:
			walk(n.body, f)
			walk(n.else_, f)
		case *forNode:
			walk(n.body, f)
			walk(n.else_, f)
		case *setBlockNode:
			walk(n.body, f)
		case *macroNode:
			walk(n.body, f)
		case *callBlockNode:
			walk(n.body, f)
		case *filterBlockNode:
			walk(n.body, f)
		}
	}
}
