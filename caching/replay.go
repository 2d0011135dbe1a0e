package caching

import (
	"github.com/llmgw/gateway/jsonstring"
	"io"
	"strconv"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

// replayPiece is the largest text or argument fragment of a replayed chunk,
// in bytes; fragments end on rune boundaries.
const replayPiece = 64

// replayStream serves a cached chat.completion as a chat.completion.chunk
// sequence that follows docs/wire.md (rules 5 to 13): a role chunk, content (or one
// tool call after another: first delta with id/type/full name, then argument
// fragments), a separate finish chunk, and a usage chunk (choices: []) only
// when the client asked for usage. All chunks are built up front into one
// buffer; Next hands them out in order. Used by one goroutine at a time.
type replayStream struct {
	chunks [][]byte
	next   int
}

// Next returns the next chunk (valid until Close) or io.EOF.
func (s *replayStream) Next() ([]byte, error) {
	if s.next >= len(s.chunks) {
		return nil, io.EOF
	}
	c := s.chunks[s.next]
	s.next++
	return c, nil
}

// Close releases nothing; safe to call more than once.
func (s *replayStream) Close() {}

// newReplayStream builds the chunks replaying completion under a new id,
// created and model.
func newReplayStream(completion []byte, id string, created int64, model string, includeUsage bool) pipeline.Stream {
	res := gjson.GetManyBytes(completion, "system_fingerprint", "choices.0.message",
		"choices.0.finish_reason", "usage")
	fp, msg, finish, usage := res[0], res[1], res[2], res[3]

	var prefix []byte
	prefix = append(prefix, `{"id":`...)
	prefix = jsonstring.Append(prefix, id)
	prefix = append(prefix, `,"object":"chat.completion.chunk","created":`...)
	prefix = strconv.AppendInt(prefix, created, 10)
	prefix = append(prefix, `,"model":`...)
	prefix = jsonstring.Append(prefix, model)
	if fp.Type == gjson.String {
		prefix = append(prefix, `,"system_fingerprint":`...)
		prefix = jsonstring.Append(prefix, fp.Str)
	}
	suffix := `,"logprobs":null,"finish_reason":null}]}`
	if includeUsage {
		suffix = `,"logprobs":null,"finish_reason":null}],"usage":null}`
	}

	b := replayBuilder{buf: make([]byte, 0, 2*len(completion)+512)}
	emit := func(delta func()) {
		start := len(b.buf)
		b.buf = append(b.buf, prefix...)
		b.buf = append(b.buf, `,"choices":[{"index":0,"delta":`...)
		delta()
		b.buf = append(b.buf, suffix...)
		b.ends = append(b.ends, [2]int{start, len(b.buf)})
	}

	calls := msg.Get("tool_calls")
	content := msg.Get("content")
	if calls.IsArray() && len(calls.Array()) > 0 {
		if text := content.String(); text != "" {
			// Text before the calls: content deltas first, then the calls
			// on chunks of their own (no content on tool-call chunks).
			emit(func() { b.buf = append(b.buf, `{"role":"assistant","content":""}`...) })
			for _, frag := range splitRunes(text, replayPiece) {
				emit(func() {
					b.buf = append(b.buf, `{"content":`...)
					b.buf = jsonstring.Append(b.buf, frag)
					b.buf = append(b.buf, '}')
				})
			}
		} else {
			emit(func() { b.buf = append(b.buf, `{"role":"assistant","content":null}`...) })
		}
		i := 0
		calls.ForEach(func(_, c gjson.Result) bool {
			idx := strconv.Itoa(i)
			emit(func() {
				b.buf = append(b.buf, `{"tool_calls":[{"index":`...)
				b.buf = append(b.buf, idx...)
				b.buf = append(b.buf, `,"id":`...)
				b.buf = jsonstring.Append(b.buf, c.Get("id").String())
				b.buf = append(b.buf, `,"type":"function","function":{"name":`...)
				b.buf = jsonstring.Append(b.buf, c.Get("function.name").String())
				b.buf = append(b.buf, `,"arguments":""}}]}`...)
			})
			for _, frag := range splitRunes(c.Get("function.arguments").String(), replayPiece) {
				emit(func() {
					b.buf = append(b.buf, `{"tool_calls":[{"index":`...)
					b.buf = append(b.buf, idx...)
					b.buf = append(b.buf, `,"function":{"arguments":`...)
					b.buf = jsonstring.Append(b.buf, frag)
					b.buf = append(b.buf, `}}]}`...)
				})
			}
			i++
			return true
		})
	} else {
		emit(func() { b.buf = append(b.buf, `{"role":"assistant","content":""}`...) })
		for _, frag := range splitRunes(content.String(), replayPiece) {
			emit(func() {
				b.buf = append(b.buf, `{"content":`...)
				b.buf = jsonstring.Append(b.buf, frag)
				b.buf = append(b.buf, '}')
			})
		}
	}

	// The finish chunk: its own chunk, empty delta.
	start := len(b.buf)
	b.buf = append(b.buf, prefix...)
	b.buf = append(b.buf, `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":`...)
	b.buf = jsonstring.Append(b.buf, finish.String())
	b.buf = append(b.buf, "}]"...)
	if includeUsage {
		b.buf = append(b.buf, `,"usage":null`...)
	}
	b.buf = append(b.buf, '}')
	b.ends = append(b.ends, [2]int{start, len(b.buf)})

	if includeUsage {
		start := len(b.buf)
		b.buf = append(b.buf, prefix...)
		b.buf = append(b.buf, `,"choices":[],"usage":`...)
		if usage.IsObject() {
			b.buf = append(b.buf, usage.Raw...)
		} else {
			b.buf = append(b.buf, `{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`...)
		}
		b.buf = append(b.buf, '}')
		b.ends = append(b.ends, [2]int{start, len(b.buf)})
	}

	s := &replayStream{chunks: make([][]byte, len(b.ends))}
	for i, e := range b.ends {
		s.chunks[i] = b.buf[e[0]:e[1]:e[1]]
	}
	return s
}

type replayBuilder struct {
	buf  []byte
	ends [][2]int
}

// splitRunes cuts s into pieces of at most max bytes (at least one rune
// each), never inside a UTF-8 sequence. "" gives no pieces.
func splitRunes(s string, max int) []string {
	if s == "" {
		return nil
	}
	out := make([]string, 0, len(s)/max+1)
	for len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		if cut == 0 { // max is shorter than this rune
			_, cut = utf8.DecodeRuneInString(s)
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}
