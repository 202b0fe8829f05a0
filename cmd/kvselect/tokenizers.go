package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
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

// addModelPathFlag adds the repeatable --model-path to fs, appending to
// dst; routes says what the tokenizers serve on that subcommand.
func addModelPathFlag(fs *flag.FlagSet, dst *[]modelPath, routes string) {
	fs.Func("model-path", "NAME=DIR: model NAME's Hugging Face tokenizer (DIR/tokenizer.json and DIR/tokenizer_config.json), read at start-up, for "+routes+"; repeatable", func(v string) error {
		mp, err := parseModelPath(v)
		if err == nil {
			*dst = append(*dst, mp)
		}
		return err
	})
}

// startTokenizers is loadTokenizers with one log line a model.
func startTokenizers(log *slog.Logger, paths []modelPath) (map[string]*text.Tokenizer, error) {
	toks, err := loadTokenizers(paths)
	for name, t := range toks {
		log.Info("tokenizer loaded", "model", name, "vocab", t.VocabSize(), "chat_template", t.ChatTemplate != "")
	}
	return toks, err
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
