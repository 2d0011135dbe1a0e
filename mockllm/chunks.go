package mockllm

import (
	"strconv"
	"unicode/utf8"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/wire"
)

// answer is a Turn resolved for one request: defaults applied, ids assigned.
// It is immutable once built and may be read by the stream goroutine.
type answer struct {
	id           string
	created      int64
	model        string
	turn         Turn
	finish       string
	usage        Usage
	chunking     Chunking
	includeUsage bool
	messages     bool // answer in Anthropic's Messages form
}

// fingerprint is the mock's system_fingerprint.
const fingerprint = "fp_mock"

// header is what every chunk and the completion of a repeat.
func (a *answer) header() wire.Header {
	return wire.Header{ID: a.id, Created: a.created, Model: a.model}
}

// empty reports whether the answer is sent without content (Fault.Empty).
func (a *answer) empty() bool { return a.turn.Fault != nil && a.turn.Fault.Empty }

// Event phases of a stream, in order.
const (
	phaseRole = iota
	phaseText
	phaseTools
	phaseFinish
	phaseUsage
	phaseEnd
)

// chunker produces the SSE data events of one answer, one at a time, so a
// large answer never needs all its events in memory. Not safe for concurrent
// use; one per stream.
//
// It sequences its own chunks rather than using the gateway's encoder
// (wire.ChatSSE) on purpose: the mock plays an upstream, so it must send what
// the gateway never does (interleaved or whole tool calls, a `"content":""`
// role delta, events cut mid-write) and it is the independent side the
// gateway's stream rules are tested against. Only the framing every chunk
// shares (wire.AppendHead, wire.AppendChoiceEnd) is the same code.
type chunker struct {
	a       *answer
	head    []byte // `data: {...,"choices":[`, shared by every event
	phase   int
	textPos int
	// pos[i] is the next argument byte of tool call i; -1 = first delta
	// (index, id, type, name) not sent yet.
	pos []int
	cur int // sequential mode: current call; interleaved: round-robin cursor
}

func newChunker(a *answer) *chunker {
	c := &chunker{a: a}
	h := make([]byte, 0, 160+len(a.model))
	h = append(h, "data: "...)
	h = wire.AppendHead(h, "chat.completion.chunk", a.header())
	h = wire.AppendFingerprint(h, fingerprint)
	h = append(h, `,"choices":[`...)
	c.head = h
	if n := len(a.turn.ToolCalls); n > 0 {
		c.pos = make([]int, n)
		for i := range c.pos {
			c.pos[i] = -1
		}
	}
	return c
}

// next appends the next event (ending in "\n\n") to dst; ok is false when the
// answer is complete ([DONE] is not an event of the chunker).
func (c *chunker) next(dst []byte) (out []byte, ok bool) {
	for {
		switch c.phase {
		case phaseRole:
			c.phase = phaseText
			if c.a.empty() {
				c.phase = phaseUsage
			}
			dst = append(dst, c.head...)
			if c.a.turn.Text == "" && len(c.a.turn.ToolCalls) > 0 {
				dst = append(dst, `{"index":0,"delta":{"role":"assistant","content":null}`...)
			} else {
				dst = append(dst, `{"index":0,"delta":{"role":"assistant","content":""}`...)
			}
			return c.closeChoice(dst, "")
		case phaseText:
			text := c.a.turn.Text
			if c.textPos >= len(text) {
				c.phase = phaseTools
				continue
			}
			end := c.textPos
			for n := 0; n < c.a.chunking.TextRunes && end < len(text); n++ {
				_, size := utf8.DecodeRuneInString(text[end:])
				end += size
			}
			dst = append(dst, c.head...)
			dst = append(dst, `{"index":0,"delta":{"content":`...)
			dst = jsonstring.Append(dst, text[c.textPos:end])
			dst = append(dst, '}')
			c.textPos = end
			return c.closeChoice(dst, "")
		case phaseTools:
			i, ok := c.pickCall()
			if !ok {
				c.phase = phaseFinish
				continue
			}
			return c.closeChoice(c.toolDelta(dst, i), "")
		case phaseFinish:
			c.phase = phaseUsage
			dst = append(dst, c.head...)
			dst = append(dst, `{"index":0,"delta":{}`...)
			return c.closeChoice(dst, c.a.finish)
		case phaseUsage:
			c.phase = phaseEnd
			if !c.a.includeUsage {
				continue
			}
			dst = append(dst, c.head...)
			dst = append(dst, `],"usage":`...)
			dst = appendUsage(dst, c.a.usage)
			return append(dst, "}\n\n"...), true
		default:
			return dst, false
		}
	}
}

// closeChoice ends a choice object opened after head, closes the chunk and
// the event.
func (c *chunker) closeChoice(dst []byte, finish string) ([]byte, bool) {
	dst = wire.AppendChoiceEnd(dst, finish, c.a.includeUsage)
	return append(dst, "}\n\n"...), true
}

// done reports whether tool call i has nothing left to send.
func (c *chunker) done(i int) bool {
	p := c.pos[i]
	if p < 0 {
		return false
	}
	return c.a.chunking.WholeToolCalls || p >= len(c.a.turn.ToolCalls[i].Arguments)
}

// pickCall chooses the tool call whose delta comes next.
func (c *chunker) pickCall() (int, bool) {
	n := len(c.pos)
	if !c.a.chunking.InterleaveToolCalls {
		for c.cur < n && c.done(c.cur) {
			c.cur++
		}
		return c.cur, c.cur < n
	}
	for k := 0; k < n; k++ {
		i := (c.cur + k) % n
		if !c.done(i) {
			c.cur = i + 1
			return i, true
		}
	}
	return 0, false
}

// toolDelta appends the head and the next delta of tool call i, leaving the
// choice object open.
func (c *chunker) toolDelta(dst []byte, i int) []byte {
	tc := c.a.turn.ToolCalls[i]
	dst = append(dst, c.head...)
	dst = append(dst, `{"index":0,"delta":{"tool_calls":[{"index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	if c.pos[i] < 0 {
		args := ""
		c.pos[i] = 0
		if c.a.chunking.WholeToolCalls {
			args = tc.Arguments
			c.pos[i] = len(args)
		}
		dst = append(dst, `,"id":`...)
		dst = jsonstring.Append(dst, tc.ID)
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = jsonstring.Append(dst, tc.Name)
		dst = append(dst, `,"arguments":`...)
		dst = jsonstring.Append(dst, args)
		return append(dst, "}}]}"...)
	}
	args := tc.Arguments
	start := c.pos[i]
	end := cutRunes(args, start, c.a.chunking.ArgBytes)
	c.pos[i] = end
	dst = append(dst, `,"function":{"arguments":`...)
	dst = jsonstring.Append(dst, args[start:end])
	return append(dst, "}}]}"...)
}

// cutRunes returns the end of a fragment of about n bytes of s starting at
// start, on a rune boundary, always making progress.
func cutRunes(s string, start, n int) int {
	end := start + n
	if end >= len(s) {
		return len(s)
	}
	for end > start && !utf8.RuneStart(s[end]) {
		end--
	}
	if end == start {
		end = start + 1
		for end < len(s) && !utf8.RuneStart(s[end]) {
			end++
		}
	}
	return end
}
