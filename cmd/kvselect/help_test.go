package main

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// TestHelpExitsZero: `kvselect SUB --help` of the built binary prints
// SUB's usage and exits 0 without an error log, for every subcommand (the
// indexer and the picker logged "invalid configuration" and exited 2).
func TestHelpExitsZero(t *testing.T) {
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"serve", "indexer", "epp", "mocker", "bench", "health"} {
		var out bytes.Buffer
		cmd := exec.Command(bin, sub, "--help")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Errorf("%s --help: %v\n%s", sub, err, out.String())
			continue
		}
		if s := out.String(); !strings.Contains(strings.ToLower(s), "usage") || !strings.Contains(s, "kvselect "+sub) || strings.Contains(s, "level=ERROR") {
			t.Errorf("%s --help: want its usage and no error log, got:\n%s", sub, s)
		}
	}
}
