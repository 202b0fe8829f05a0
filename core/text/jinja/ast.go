package jinja

// The syntax tree: jinja2.nodes' shapes, as far as the subset goes, so
// that an analysis written against jinja2's tree (vLLM's content-format
// detection: detect.go) reads the same here.

type node interface{}

// Statements.
type (
	dataNode   struct{ text string }
	outputNode struct{ expr expr }
	ifNode     struct {
		cond        expr
		body, else_ []node
	}
	forNode struct {
		target      expr // *nameExpr or *tupleExpr of names
		iter        expr
		filter      expr // the "if" of "for x in y if c"; nil none
		body, else_ []node
		line        int
	}
	setNode struct {
		target expr // *nameExpr, *tupleExpr or *nsRefExpr
		value  expr
		line   int
	}
	setBlockNode struct {
		target  expr
		filters []*filterExpr // applied to the body, in order; node nil
		body    []node
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // for the last len(defaults) params
		body     []node
	}
	callBlockNode struct {
		call     *callExpr
		params   []string
		defaults []expr
		body     []node
	}
	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}
	breakNode    struct{}
	continueNode struct{}
)

// Expressions.
type (
	expr      interface{}
	constExpr struct{ v Value }
	nameExpr  struct {
		name string
		line int
	}
	nsRefExpr   struct{ name, attr string }
	tupleExpr   struct{ items []expr }
	listExpr    struct{ items []expr }
	dictExpr    struct{ keys, vals []expr }
	getattrExpr struct {
		obj  expr
		attr string
	}
	getitemExpr struct {
		obj expr
		arg expr // a *sliceExpr for obj[a:b:c]
	}
	sliceExpr struct{ start, stop, step expr } // nil: omitted
	callExpr  struct {
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	kwarg struct {
		name string
		val  expr
	}
	filterExpr struct {
		node   expr // nil in a filter block
		name   string
		args   []expr
		kwargs []kwarg
	}
	testExpr struct {
		node   expr
		name   string
		args   []expr
		kwargs []kwarg
	}
	notExpr struct{ x expr }
	negExpr struct{ x expr }
	posExpr struct{ x expr }
	binExpr struct {
		op   string // + - * / // % ** ~ and or
		l, r expr
	}
	compareExpr struct {
		first expr
		ops   []string // == != < <= > >= in notin
		rest  []expr
	}
	condExpr struct{ test, then, else_ expr } // else_ nil: undefined
)
