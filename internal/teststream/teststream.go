// Package teststream serves fixed chat chunks as a pipeline.Stream, for
// tests of the layers that read streams.
package teststream

import (
	"io"

	"github.com/llmgw/gateway/pipeline"
)

// Chunks serves chunks in order, then io.EOF.
func Chunks(chunks ...string) pipeline.Stream {
	return &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
		if len(chunks) == 0 {
			return nil, io.EOF
		}
		c := chunks[0]
		chunks = chunks[1:]
		return []byte(c), nil
	}, CloseFunc: func() {}}
}
