package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvselect/kvselect/core/text"
)

// modelPath is one --model-path NAME=DIR.
type modelPath struct{ name, dir string }

func parseModelPath(v string) (modelPath, error) {
	name, dir, ok := strings.Cut(v, "=")
	if !ok || strings.TrimSpace(name) == "" || strings.TrimSpace(dir) == "" {
		return modelPath{}, fmt.Errorf("%q: want NAME=DIR", v)
	}
	return modelPath{strings.TrimSpace(name), strings.TrimSpace(dir)}, nil
}

// loadTokenizers reads every --model-path's tokenizer files, once, at
// start-up: a file that cannot be read, parsed or used (a model type,
// pre-tokenizer or normalizer core/text does not implement) is an error
// naming the model and the file.
func loadTokenizers(paths []modelPath) (map[string]*text.Tokenizer, error) {
	if len(paths) == 0 {
		return nil, nil
	}
	out := map[string]*text.Tokenizer{}
	for _, p := range paths {
		if _, dup := out[p.name]; dup {
			return nil, fmt.Errorf("--model-path: model %q given twice", p.name)
		}
		tjPath := filepath.Join(p.dir, "tokenizer.json")
		tj, err := os.ReadFile(tjPath)
		if err != nil {
			return nil, fmt.Errorf("--model-path %s: %w", p.name, err)
		}
		tc, err := os.ReadFile(filepath.Join(p.dir, "tokenizer_config.json"))
		if errors.Is(err, os.ErrNotExist) {
			tc = nil
		} else if err != nil {
			return nil, fmt.Errorf("--model-path %s: %w", p.name, err)
		}
		tok, err := text.Load(tj, tc)
		if err != nil {
			return nil, fmt.Errorf("--model-path %s: %s: %w", p.name, tjPath, err)
		}
		out[p.name] = tok
	}
	return out, nil
}
