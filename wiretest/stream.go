package wiretest

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
)

// done is the only terminator Node's SDK accepts (exact comparison).
var doneTerm = []byte("data: [DONE]\n\n")

// Options says what the client asked for, and so what the stream must hold.
type Options struct {
	// WantUsage: stream_options.include_usage was requested. Then exactly one
	// usage chunk must come, last, with choices []. When false no chunk may
	// carry a non-null usage.
	WantUsage bool
	// WantError: the stream must end with "event: error" plus
	// data {"error":{message,type,param,code}} (all four keys) and no [DONE].
	WantError bool
}

// ToolCall is one client-visible tool call accumulated from a stream.
type ToolCall struct {
	Index     int
	ID        string
	Name      string
	Arguments string
}

// Summary is what a client accumulates from a valid stream. Content,
// ToolCalls and FinishReason belong to choice 0. Chunks and Error alias the
// raw input given to CheckStream; Usage is a copy.
type Summary struct {
	// Chunks holds the JSON of every chunk, usage chunk included, in order
	// ([DONE] and the error event excluded).
	Chunks [][]byte
	// Content is choice 0's concatenated content.
	Content string
	// ToolCalls are choice 0's tool calls, by index.
	ToolCalls []ToolCall
	// FinishReason is choice 0's finish_reason ("" if none arrived).
	FinishReason string
	// Usage is the usage chunk's raw usage JSON, or nil.
	Usage []byte
	// ID and Model are the values every chunk carried.
	ID, Model string
	// Choices is the number of distinct choices seen.
	Choices int
	// KeepAlives counts ":" comment lines.
	KeepAlives int
	// Error is the error event's raw data JSON, or nil.
	Error []byte
}

// choiceState tracks one choice across chunks.
type choiceState struct {
	finished  bool
	calls     int // tool calls started: the next new index must equal it
	cur       int // index of the call receiving fragments
	finishRsn string
}

// checker holds the state of one CheckStream run.
type checker struct {
	opt      Options
	sum      *Summary
	choices  []choiceState
	created  string
	content  strings.Builder
	chunk    int // current chunk number (1-based)
	line     int
	usageAt  int // chunk number of the usage chunk, 0 if none yet
	nChoices int // chunks that carried at least one choice
}

// CheckStream parses raw, the SSE body exactly as a client received it, and
// checks it against the streaming rules of docs/wire.md (framing, chunks, tool
// calls, end of stream, errors). It returns the first violation as a *Violation, together
// with a Summary of what was parsed up to that point (the Summary is never
// nil). raw is only read; the Summary's slices alias it. Safe for concurrent
// use on different inputs.
func CheckStream(raw []byte, opt Options) (*Summary, error) {
	c := &checker{opt: opt, sum: &Summary{}}
	v := c.run(raw)
	c.sum.Content = c.content.String()
	if v != nil {
		return c.sum, v
	}
	return c.sum, nil
}

func (c *checker) fail(rule Rule, format string, args ...any) *Violation {
	return &Violation{Chunk: c.chunk, Line: c.line, Rule: rule, Msg: fmt.Sprintf(format, args...)}
}

func (c *checker) run(raw []byte) *Violation {
	events, v := splitEvents(raw)
	if v != nil {
		return v
	}
	var sawDone, sawError bool
	for _, ev := range events {
		c.line = ev.line
		c.sum.KeepAlives += ev.comments
		if ev.hasData {
			c.chunk++
		}
		if sawDone {
			return c.fail(RuleDone, "event after [DONE]")
		}
		if sawError {
			return c.fail(RuleErrorEvent, "event after the error event; close the stream after it")
		}
		if !ev.hasData {
			continue // a comment-only event: a keep-alive
		}
		switch {
		case ev.isError:
			sawError = true
			if v := c.errorEvent(ev.data); v != nil {
				return v
			}
		case bytes.HasPrefix(ev.data, []byte("[DONE]")):
			if string(ev.data) != "[DONE]" {
				return c.fail(RuleDone, "malformed terminator %q; send exactly data: [DONE]", clip(ev.data))
			}
			if c.opt.WantError {
				return c.fail(RuleDone, "[DONE] on a stream that must end with an error event")
			}
			sawDone = true
		default:
			if v := c.chunkJSON(ev.data); v != nil {
				return v
			}
		}
	}
	c.chunk++ // end-of-stream problems point past the last event
	c.line = bytes.Count(raw, []byte("\n")) + 1
	if c.opt.WantError {
		if !sawError {
			return c.fail(RuleErrorEvent, "stream did not end with an error event")
		}
		return nil
	}
	if !sawDone {
		return c.fail(RuleDone, "stream ended without data: [DONE]")
	}
	if !bytes.HasSuffix(raw, doneTerm) {
		return c.fail(RuleDone, "stream must end with exactly %q", doneTerm)
	}
	c.chunk-- // point at [DONE]
	if c.nChoices == 0 {
		return c.fail(RuleChoices, "no chunk carried a choice")
	}
	for i, st := range c.choices {
		if !st.finished {
			return c.fail(RuleFinish, "choice %d never got a finish_reason", i)
		}
	}
	if c.opt.WantUsage && c.usageAt == 0 {
		return c.fail(RuleUsage, "include_usage requested but no usage chunk was sent")
	}
	return nil
}

// errorEvent checks the mid-stream error envelope.
func (c *checker) errorEvent(data []byte) *Violation {
	c.sum.Error = data
	if !c.opt.WantError {
		return c.fail(RuleErrorEvent, "unexpected error event: %s", clip(data))
	}
	if !jsonvalid.Bytes(data) {
		return c.fail(RuleErrorEvent, "error data is not valid JSON: %q", clip(data))
	}
	e := gjson.GetBytes(data, "error")
	if !e.IsObject() {
		return c.fail(RuleErrorEvent, `error data must be {"error":{...}}, got %s`, clip(data))
	}
	for _, k := range []string{"message", "type", "param", "code"} {
		f := e.Get(k)
		switch {
		case !f.Exists():
			return c.fail(RuleErrorEvent, "error object lacks the %q key", k)
		case (k == "message" || k == "type") && f.Type != gjson.String:
			return c.fail(RuleErrorEvent, "error.%s must be a string, got %s", k, f.Raw)
		case f.Type != gjson.String && f.Type != gjson.Null:
			return c.fail(RuleErrorEvent, "error.%s must be a string or null, got %s", k, f.Raw)
		}
	}
	if e.Get("message").Str == "" {
		return c.fail(RuleErrorEvent, "error.message is empty")
	}
	return nil
}

// chunkJSON checks one chat.completion.chunk.
func (c *checker) chunkJSON(data []byte) *Violation {
	c.sum.Chunks = append(c.sum.Chunks, data)
	if !jsonvalid.Bytes(data) || !gjson.ParseBytes(data).IsObject() {
		return c.fail(RuleJSON, "chunk is not a JSON object: %q", clip(data))
	}
	if loneSurrogate(data) {
		return c.fail(RuleUTF8, "unpaired UTF-16 surrogate escape; split text on rune boundaries")
	}
	if c.usageAt != 0 {
		if gjson.GetBytes(data, "usage").IsObject() {
			return c.fail(RuleUsage, "second usage chunk (first was chunk %d)", c.usageAt)
		}
		return c.fail(RuleUsage, "chunk after the usage chunk %d; usage must be last", c.usageAt)
	}
	r := gjson.GetManyBytes(data, "error", "object", "id", "created", "model", "choices", "usage")
	if r[0].Exists() {
		return c.fail(RuleErrorKey, "top-level error key %s in a normal chunk (openai-go treats any error key as fatal; use event: error)", r[0].Raw)
	}
	if r[1].Type != gjson.String || r[1].Str != "chat.completion.chunk" {
		return c.fail(RuleObject, `object = %s, want "chat.completion.chunk"`, rawOr(r[1]))
	}
	if v := c.constant(RuleID, "id", r[2], &c.sum.ID); v != nil {
		return v
	}
	if r[3].Type != gjson.Number || strings.ContainsAny(r[3].Raw, ".eE-") {
		return c.fail(RuleCreated, "created = %s, want unix seconds", rawOr(r[3]))
	}
	if c.created == "" {
		c.created = r[3].Raw
	} else if r[3].Raw != c.created {
		return c.fail(RuleCreated, "created changed from %s to %s", c.created, r[3].Raw)
	}
	if v := c.constant(RuleModel, "model", r[4], &c.sum.Model); v != nil {
		return v
	}
	if !r[5].IsArray() {
		return c.fail(RuleChoices, "choices = %s, want an array (use [] on the usage chunk)", rawOr(r[5]))
	}
	choices := r[5].Array()
	switch u := r[6]; {
	case u.Exists() && u.Type != gjson.Null:
		if !c.opt.WantUsage {
			return c.fail(RuleUsage, "usage %s sent but include_usage was not requested", clip([]byte(u.Raw)))
		}
		if !u.IsObject() {
			return c.fail(RuleUsage, "usage = %s, want an object", clip([]byte(u.Raw)))
		}
		if len(choices) != 0 {
			return c.fail(RuleUsage, "usage chunk must have choices [], has %d", len(choices))
		}
		c.usageAt = c.chunk
		c.sum.Usage = []byte(u.Raw)
		return nil
	}
	if len(choices) > 0 {
		c.nChoices++
	}
	seen := make(map[int64]bool, len(choices))
	for _, ch := range choices {
		if v := c.choice(ch, seen); v != nil {
			return v
		}
	}
	return nil
}

// constant checks a string field that must be non-empty and the same on
// every chunk, recording its first value in *first.
func (c *checker) constant(rule Rule, key string, r gjson.Result, first *string) *Violation {
	if r.Type != gjson.String || r.Str == "" {
		return c.fail(rule, "%s = %s, want a non-empty string", key, rawOr(r))
	}
	if *first == "" {
		*first = r.Str
	} else if r.Str != *first {
		return c.fail(rule, "%s changed from %q to %q", key, *first, r.Str)
	}
	return nil
}

// rawOr renders a possibly missing value for messages.
func rawOr(r gjson.Result) string {
	if !r.Exists() {
		return "(missing)"
	}
	return clip([]byte(r.Raw))
}

// loneSurrogate reports whether data holds a \uD800-\uDFFF escape that is not
// part of a high+low pair. Backslashes only occur inside JSON strings.
func loneSurrogate(data []byte) bool {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' || i+1 >= len(data) {
			continue
		}
		if data[i+1] != 'u' {
			i++ // skip the escaped character (this also consumes "\\")
			continue
		}
		v, ok := hex4(data, i+2)
		if !ok {
			return false // invalid JSON; reported elsewhere
		}
		switch {
		case v >= 0xDC00 && v <= 0xDFFF:
			return true
		case v >= 0xD800 && v <= 0xDBFF:
			lo, ok := hex4(data, i+8)
			if i+7 >= len(data) || data[i+6] != '\\' || data[i+7] != 'u' || !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

// hex4 reads the four hex digits at b[at:].
func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	return jsonstring.Hex4(b[at : at+4])
}
