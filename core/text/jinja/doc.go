// Package jinja renders Hugging Face chat templates as Python's Jinja2
// (3.1) renders them in the environment transformers builds for
// apply_chat_template (huggingface/transformers:
// src/transformers/utils/chat_template_utils.py, _compile_jinja_template):
// an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks,
// the loopcontrols extension, transformers' generation block, the
// globals raise_exception and strftime_now, and its own tojson filter.
//
// The caller's contract:
//
//  1. Parse a template once (Parse); the *Template is immutable and safe
//     for concurrent renders.
//  2. Build the context from values as Python's json.loads builds them:
//     FromJSON keeps a JSON object's key order and an integer's type (1
//     is an int, 1.0 a float), which tojson, items() and repr show.
//     ValueOf converts plain Go values (map keys sorted).
//  3. Render; an error wraps one of ErrRender (what jinja2 raises at
//     render time), ErrRaised (raise_exception: *Raised has the message)
//     or ErrLimit (limits.go). strftime_now reads a clock, so the caller
//     passes one as a var: vars["strftime_now"] = Strftime(now).
//
// Python semantics kept: values print as str() prints them (True, None,
// 2.0, {'a': 1}, ['x']); strings are indexed, sliced and measured in
// code points; and/or return an operand; int arithmetic (// and %
// floor, ** exact, overflow an error where Python grows); comparisons of
// unorderable types are errors; Undefined prints "", iterates empty and
// fails on any further use; the sandbox forbids methods that mutate a
// list or dict (append, update, ...: a SecurityError when used).
// map, select, reject, selectattr, rejectattr, unique, batch, items and
// reverse return one-pass generators (always true, no length), as in
// Python.
//
// Not implemented (a syntax or render error, never a guess): template
// inheritance and inclusion (extends, block, include, import), recursive
// loops, with, *args/**kwargs in calls, format specs in str.format, and
// the filters no chat template uses (groupby, slice, wordwrap, urlize,
// xmlattr, filesizeformat, pprint, striptags). Known differences: a
// generator or method prints as <generator object> where Python prints
// an address; Python's big integers are an OverflowError here.
//
// The package imports only the standard library and reads no clock, file
// or network.
package jinja
