package jinja

// Limits: a template is code from a model repository and a conversation
// is a client's; a render must end, and in bounded memory, whatever
// either holds. jinja2 has none of these (but MAX_RANGE); each is far
// above what a real chat template needs (the largest real render in
// testdata is well under 1 MiB and 10,000 steps).
const (
	// MaxOutput bounds the rendered text, and any one string, list or
	// dict a render builds, in bytes (or items).
	MaxOutput = 32 << 20
	// MaxAlloc bounds the bytes a render writes to output buffers and
	// builds as strings, summed over the render: a bound on its time and
	// garbage when a loop rebuilds a growing string.
	MaxAlloc = 512 << 20
	// MaxSteps bounds loop iterations, macro calls and items visited by
	// filters and methods, summed over a render.
	MaxSteps = 4 << 20
	// MaxDepth bounds nested macro calls (recursion).
	MaxDepth = 100
	// maxNesting bounds the parser's recursion (nested expressions and
	// blocks).
	maxNesting = 200
	// maxRange is the sandbox's MAX_RANGE: range() of more items is an
	// error in jinja2's sandbox too.
	maxRange = 100000
)
