package toolloop

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

// capMW truncates results above max_result_bytes, with a note that names
// the size the tool really produced (see outputSize).
func (l *Loop) capMW(next pipeline.ToolHandler) pipeline.ToolHandler {
	max := l.cfg.MaxResultBytes
	return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		if max <= 0 {
			return next.CallTool(ctx, c)
		}
		var sz *outputSize // only a sized tool (an http tool) reports one
		if t := l.lookup(ctx, c.Name); t != nil && t.sized {
			sz = &outputSize{}
			ctx = context.WithValue(ctx, outputSizeKey{}, sz)
		}
		res, err := next.CallTool(ctx, c)
		if err != nil || res == nil || (len(res.Content) <= max && (sz == nil || !sz.cut)) {
			return res, err
		}
		res.Content = truncateResult(res.Content, max, sz)
		return res, nil
	})
}

// outputSize carries the size of a tool's whole output from the executor up
// to capMW, which may see only a prefix of it: an http tool reads a bounded
// prefix of a large answer. capMW puts one in the context of each call;
// execute resets it before every attempt.
type outputSize struct {
	n       int64 // bytes the tool produced; 0 = the length of the result's text
	atLeast bool  // n is a lower bound: counting stopped there
	cut     bool  // the executor returned a prefix of n bytes
}

type outputSizeKey struct{}

// sizeOf returns the outputSize of ctx's call, or nil outside capMW.
func sizeOf(ctx context.Context) *outputSize {
	sz, _ := ctx.Value(outputSizeKey{}).(*outputSize)
	return sz
}

// truncateResult cuts the text of content (the data, or the error message)
// so that the whole result fits limit bytes once the text is escaped as a JSON
// string, at a rune boundary, and notes the bytes kept and the size of the
// tool's whole output (sz, or the text's length when sz knows none).
func truncateResult(content []byte, limit int, sz *outputSize) []byte {
	r := gjson.ParseBytes(content)
	status := r.Get("status").String()
	var text []byte
	if status == "error" {
		text = []byte(r.Get("error.message").String())
	} else if d := r.Get("data"); d.Type == gjson.String {
		text = []byte(d.String())
	} else {
		text = []byte(d.Raw)
	}
	total, atLeast := int64(len(text)), false
	if sz != nil && sz.n > total {
		total, atLeast = sz.n, sz.atLeast
	}
	// The longest prefix that fits, by binary search: the rendered length
	// grows with the prefix, and escaping (up to 6 bytes for 1) makes it
	// hard to compute directly. Every byte renders to at least one byte, so
	// no prefix longer than limit fits.
	lo, hi := 0, min(len(text), limit)
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if len(truncated(status, text[:runeFloor(text, mid)], total, atLeast)) <= limit {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return truncated(status, text[:runeFloor(text, lo)], total, atLeast)
}

// runeFloor returns the largest n' <= n that does not split a rune of b
// (inside invalid UTF-8 it gives up after utf8.UTFMax-1 bytes: those bytes
// are written as U+FFFD anyway).
func runeFloor(b []byte, n int) int {
	for i := 0; i < utf8.UTFMax-1 && n > 0 && n < len(b) && !utf8.RuneStart(b[n]); i++ {
		n--
	}
	return n
}

// truncated renders a truncated result keeping text of a total-byte output.
func truncated(status string, text []byte, total int64, atLeast bool) []byte {
	of := ""
	if atLeast {
		of = "more than "
	}
	note := fmt.Sprintf("result truncated to %d of %s%d bytes", len(text), of, total)
	out := make([]byte, 0, len(text)+len(note)+96)
	if status == "error" {
		out = append(out, `{"status":"error","error":{"type":"tool_error","message":`...)
		out = appendJSONString(out, text)
		out = append(out, '}')
	} else {
		out = append(out, `{"status":"ok","data":`...)
		out = appendJSONString(out, text)
	}
	out = append(out, `,"truncated":true,"note":`...)
	out = appendJSONString(out, []byte(note))
	return append(out, '}')
}
