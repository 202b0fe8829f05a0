package httpapi

import "testing"

func TestUnescapeSegment(t *testing.T) {
	for in, want := range map[string]string{
		"plain": "plain", "a%2Fb": "a/b", "a%2fb": "a/b", "%C3%A9": "é", "50%": "50%",
		"%4": "%4", "%zz": "%zz", "%%41": "%A", "a+b": "a+b", "%": "%",
	} {
		if got := string(unescapeSegment([]byte(in))); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
