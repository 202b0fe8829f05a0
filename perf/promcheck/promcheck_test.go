package promcheck

import (
	"strings"
	"testing"
)

// TestCheckCatches: each defect a strict scraper or a dashboard trips over
// is reported, and a clean exposition passes.
func TestCheckCatches(t *testing.T) {
	clean := "# HELP a_total As.\n# TYPE a_total counter\na_total{x=\"1\"} 1\na_total{x=\"2\"} 2\n" +
		"# HELP h Hs.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n"
	if _, problems := Check([]byte(clean)); len(problems) != 0 {
		t.Fatalf("clean exposition: %v", problems)
	}
	for _, tc := range []struct{ name, text, want string }{
		{"repeated TYPE", "# HELP a A.\n# TYPE a gauge\na 1\n# TYPE a gauge\n", "second TYPE"},
		{"no HELP", "# TYPE a gauge\na 1\n", "no # HELP"},
		{"empty HELP", "# HELP a\n# TYPE a gauge\na 1\n", "no # HELP"},
		{"no TYPE", "# HELP a A.\na 1\n", "no # TYPE"},
		{"duplicate series", "# HELP a A.\n# TYPE a gauge\na{x=\"1\",y=\"2\"} 1\na{y=\"2\", x=\"1\"} 2\n", "already written"},
	} {
		_, problems := Check([]byte(tc.text))
		if !strings.Contains(strings.Join(problems, "\n"), tc.want) {
			t.Errorf("%s: problems %q, want one mentioning %q", tc.name, problems, tc.want)
		}
	}
}
