package text

// The byte-level alphabet of GPT-2 style BPE (bytes_to_unicode in
// openai/gpt-2 encoder.py, tokenizers' pre_tokenizers/byte_level.rs):
// every byte maps to one printable code point, the printable Latin-1
// bytes to themselves and the others to U+0100 upwards, in byte order.
// A byte-level vocabulary spells its tokens in these code points.

var (
	// byteRune[b] is the code point of byte b.
	byteRune [256]rune
	// byteChar[b] is byteRune[b] encoded in UTF-8 (1 or 2 bytes).
	byteChar [256]string
	// runeByte maps a code point of the alphabet back to its byte; -1
	// for one outside it.
	runeByte = map[rune]int{}
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		r := rune(b)
		if !printable {
			r = rune(256 + n)
			n++
		}
		byteRune[b] = r
		byteChar[b] = string(r)
		runeByte[r] = b
	}
}
