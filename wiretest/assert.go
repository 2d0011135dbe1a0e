package wiretest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// CheckStreamAll runs CheckStream on raw and validates every chunk (and the
// error event's data, if any) against schema, which may be nil to skip shape
// checks. On the first problem it fails the test with tb.Fatalf, quoting the
// offending part of the stream; it must therefore be called from the test's
// own goroutine. It returns the Summary of a valid stream.
func CheckStreamAll(tb testing.TB, raw []byte, opt Options, schema *Schema) *Summary {
	tb.Helper()
	sum, err := CheckStream(raw, opt)
	if err != nil {
		var v *Violation
		if errors.As(err, &v) {
			tb.Fatalf("%v\n%s", err, excerpt(raw, v.Line))
		}
		tb.Fatalf("%v", err)
	}
	if schema == nil {
		return sum
	}
	for i, ch := range sum.Chunks {
		if err := schema.Chunk(ch); err != nil {
			tb.Fatalf("wiretest: chunk %d does not match the schema: %v\nchunk: %s", i+1, err, ch)
		}
	}
	if sum.Error != nil {
		if err := schema.ErrorBody(sum.Error); err != nil {
			tb.Fatalf("wiretest: error event does not match ErrorResponse: %v\ndata: %s", err, sum.Error)
		}
	}
	return sum
}

// excerpt renders the lines of raw around line (1-based) with numbers, the
// offending one marked, so a failure reads without dumping the whole stream.
func excerpt(raw []byte, line int) string {
	lines := bytes.Split(raw, []byte("\n"))
	from, to := max(line-4, 1), min(line+4, len(lines))
	var sb strings.Builder
	sb.WriteString("stream excerpt:\n")
	for n := from; n <= to; n++ {
		mark := "  "
		if n == line {
			mark = "> "
		}
		fmt.Fprintf(&sb, "%s%4d | %s\n", mark, n, clip(lines[n-1]))
	}
	return sb.String()
}
