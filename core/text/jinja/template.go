package jinja

import (
	"errors"
	"strings"
)

// Template is a parsed template; safe for concurrent renders.
type Template struct {
	body []node
}

// Parse parses src as transformers' environment does (trim_blocks,
// lstrip_blocks, loopcontrols, the generation block). The error wraps
// ErrSyntax.
func Parse(src string) (*Template, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	body, err := p.parseTemplate()
	if err != nil {
		return nil, err
	}
	return &Template{body: body}, nil
}

// Render renders the template with vars as its context (jinja2's
// render(**vars)); the globals range, namespace, dict, raise_exception
// (and any the caller adds to vars, such as strftime_now: Strftime) are
// there too. Values in vars are converted by ValueOf. The error wraps
// ErrRender, ErrRaised or ErrLimit.
func (t *Template) Render(vars map[string]any) (string, error) {
	r := &renderer{vars: make(map[string]Value, len(vars))}
	for k, v := range vars {
		r.vars[k] = ValueOf(v)
	}
	var b strings.Builder
	r.out = &b
	err := r.block(t.body, &scope{})
	if err != nil {
		if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
			return "", syntaxErr(0, "break or continue outside a loop")
		}
		return "", err
	}
	return b.String(), nil
}
