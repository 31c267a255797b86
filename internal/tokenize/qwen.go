package tokenize

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"sync"
)

// qwen3JSON is the Qwen3 tokenizer.json, gzipped; models/qwen3/README.md
// says where it comes from and under what licence.
//
//go:embed models/qwen3/tokenizer.json.gz
var qwen3JSON []byte

var qwenOnce = sync.OnceValues(func() (*HF, error) {
	zr, err := gzip.NewReader(bytes.NewReader(qwen3JSON))
	if err != nil {
		return nil, fmt.Errorf("embedded qwen3 tokenizer: %w", err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("embedded qwen3 tokenizer: %w", err)
	}
	return ParseHF(data)
})

// Qwen returns the Qwen3 tokenizer built into the binary (its vocabulary
// and merges are those of Qwen2 and Qwen2.5 too; Qwen3 adds <think> and
// </think> and two tool-response tokens). It is parsed once and shared.
func Qwen() (*HF, error) { return qwenOnce() }
