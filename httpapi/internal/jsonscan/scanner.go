package jsonscan

// Scanner reads one JSON document. The zero value reads an empty
// document; New and Reset give it one. A Scanner may be reused for another
// document with Reset, which keeps its unescape buffer: a pooled Scanner
// decodes escaped strings without allocating once the buffer has grown.
type Scanner struct {
	b      []byte
	i      int
	strbuf []byte
	// keyEnd is the offset just past the last object key and the
	// whitespace after it, where serde_json reports a duplicate field.
	keyEnd int
}

// New returns a Scanner reading b.
func New(b []byte) *Scanner { return &Scanner{b: b} }

// Reset makes s read b from its start, keeping the storage of its
// unescape buffer. Reset(nil) drops every reference into the previous
// document (for a Scanner kept in a pool); strings it returned are then
// invalid.
func (s *Scanner) Reset(b []byte) { *s = Scanner{b: b, strbuf: s.strbuf[:0]} }

// Retained is the number of bytes s keeps between documents: its unescape
// buffer's capacity.
func (s *Scanner) Retained() int { return cap(s.strbuf) }

// Input returns the document s reads.
func (s *Scanner) Input() []byte { return s.b }

// Offset returns the offset in Input of the next byte to read.
func (s *Scanner) Offset() int { return s.i }

// pos returns the 1-based line and column of s.i.
func (s *Scanner) pos() (line, col int) {
	line, col = 1, 0
	for _, c := range s.b[:min(s.i, len(s.b))] {
		if c == '\n' {
			line, col = line+1, 0
		} else {
			col++
		}
	}
	return line, col
}

// SkipSpace consumes whitespace.
func (s *Scanner) SkipSpace() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// Peek consumes whitespace and returns the next byte, 0 at the end of the
// input.
func (s *Scanner) Peek() byte {
	s.SkipSpace()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// End checks that only whitespace follows the top-level value.
func (s *Scanner) End() error {
	s.SkipSpace()
	if s.i != len(s.b) {
		return s.SyntaxErr("trailing characters")
	}
	return nil
}
