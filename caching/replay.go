package caching

import (
	"io"
	"math"
	"sync/atomic"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// replayPiece is the largest text or argument fragment of a replayed chunk,
// in bytes, of a text up to maxReplayPieces of them; fragments end on rune
// boundaries. A longer text is cut into maxReplayPieces larger ones
// (pieceOf): at 64 bytes a piece, a chunk's frame is twice its text, and a
// 3 MB answer's replay, built whole before its first byte, held about 12
// times the answer (a resource probe: twenty slow readers of one took 700 MB).
const (
	replayPiece     = 64
	maxReplayPieces = 256
)

// pieceOf is the piece size of a text of n bytes.
func pieceOf(n int) int { return max(replayPiece, (n+maxReplayPieces-1)/maxReplayPieces) }

// replayStream serves a cached chat.completion as a chat.completion.chunk
// sequence that follows docs/wire.md (rules 5 to 13): a role chunk, the
// reasoning (reasoning_content, reasoning) when the answer had some, content,
// then one tool call after another (first delta with id/type/full name, then
// argument fragments), a separate finish chunk, and a usage chunk
// (choices: []) only when the client asked for usage; the last chunk
// carries the answer's plan (x_gateway.todos) when it had one. All chunks are built
// up front into one buffer; Next hands them out in order. Used by one
// goroutine at a time.
type replayStream struct {
	chunks [][]byte
	next   int
	closed atomic.Bool // Buffered may be asked from another goroutine

	// The stored answer's server calls, each told to hear before the
	// chunk it preceded in the live answer (pin.chunk), as the tool loop
	// tells them from within its Next.
	pins []pin
	hear func(*pipeline.ServerCall)
}

type pin struct {
	chunk int
	call  storedCall
}

// Next returns the next chunk (valid until Close) or io.EOF.
func (s *replayStream) Next() ([]byte, error) {
	for len(s.pins) > 0 && s.pins[0].chunk <= s.next {
		s.pins[0].call.tell(s.hear)
		s.pins = s.pins[1:]
	}
	if s.next >= len(s.chunks) {
		return nil, io.EOF
	}
	c := s.chunks[s.next]
	s.next++
	return c, nil
}

// Close releases nothing; safe to call more than once.
func (s *replayStream) Close() { s.closed.Store(true) }

// Buffered says that every chunk is here (until Close): Next never waits,
// so the writer sends the replay in as few writes as it can
// (pipeline.Lookahead).
func (s *replayStream) Buffered() bool { return !s.closed.Load() }

// newReplayStream builds the chunks replaying completion under a new id,
// created and model. They are encoded by wire.ChatSSE, as the tool loop's
// live chunks are, so a replay and a live stream of the same answer differ
// only in id and created (and in where text is cut: a replay cuts it in
// pieceOf pieces, and where a server call ran). With hear set, the
// stored server calls are told to it where they ran: after the text before
// them, and a mixed turn's last ones after its client calls.
func newReplayStream(completion []byte, id string, created int64, model string, includeUsage bool, hear func(*pipeline.ServerCall)) *replayStream {
	res := gjson.GetManyBytes(completion, "system_fingerprint", "choices.0.message",
		"choices.0.finish_reason", "usage", "service_tier")
	fp, msg, finish, usage, tier := res[0], res[1], res[2], res[3], res[4]

	w := wire.NewChatSSE(wire.Header{ID: id, Created: created, Model: model, Fingerprint: fp.Str, ServiceTier: tier.Str, IncludeUsage: includeUsage})
	b := replayBuilder{w: w, buf: make([]byte, 0, 2*len(completion)+512)}
	s := &replayStream{hear: hear}
	var calls []storedCall
	if hear != nil {
		calls = storedCalls(completion)
	}
	b.emit(&wire.Event{Kind: wire.Role})
	// The texts before any calls (the reasoning first, then the content and
	// a refusal, as a round streams them), then the calls on chunks of
	// their own (no content on tool-call chunks), one after the other. Each
	// text is cut where a server call ran, and the call pinned to the chunk
	// after; a mixed turn's last calls are pinned after its client calls.
	keys := [...]string{"reasoning_content", "reasoning", "content", "refusal"}
	var texts [len(keys)]string
	var done [len(keys)]int
	for i, k := range keys {
		texts[i] = msg.Get(k).String()
	}
	// cut emits each text up to at(its index), never inside a rune.
	cut := func(at func(i int) int) {
		for i, k := range keys {
			t := texts[i]
			end := min(max(at(i), done[i]), len(t))
			for end > done[i] && end < len(t) && !utf8.RuneStart(t[end]) {
				end--
			}
			for _, frag := range splitRunes(t[done[i]:end], pieceOf(len(t))) {
				b.emit(&wire.Event{Kind: wire.Text, Key: k, Text: []byte(frag)})
			}
			done[i] = end
		}
	}
	var after []storedCall
	for _, c := range calls {
		if c.after {
			after = append(after, c)
			continue
		}
		cut(func(i int) int { return *c.at.Of(keys[i]) }) // up to where the call ran
		s.pins = append(s.pins, pin{chunk: len(b.ends), call: c})
	}
	cut(func(int) int { return math.MaxInt })
	msgCalls := msg.Get("tool_calls")
	if !msgCalls.IsArray() {
		msgCalls = gjson.Result{} // null: no call (ForEach would visit the null)
	}
	msgCalls.ForEach(func(_, c gjson.Result) bool {
		b.emit(&wire.Event{Kind: wire.CallHeader, ID: c.Get("id").String(), Name: c.Get("function.name").String()})
		args := c.Get("function.arguments").String()
		for _, frag := range splitRunes(args, pieceOf(len(args))) {
			b.emit(&wire.Event{Kind: wire.CallArgs, Text: []byte(frag)})
		}
		return true
	})
	for _, c := range after {
		s.pins = append(s.pins, pin{chunk: len(b.ends), call: c})
	}
	// The plan goes on the last chunk, as the loop puts it: the usage
	// chunk when the client asked for usage, else the finish chunk.
	trace := todosTrace(completion)
	finishTrace, usageTrace := trace, []byte(nil)
	if includeUsage {
		finishTrace, usageTrace = nil, trace
	}
	b.emit(&wire.Event{Kind: wire.Finish, Finish: finish.String(), Raw: topMembers(completion), Trace: finishTrace})
	u := []byte(`{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`)
	if usage.IsObject() {
		u = []byte(usage.Raw)
	}
	b.emit(&wire.Event{Kind: wire.Usage, Raw: u, Trace: usageTrace})

	s.chunks = make([][]byte, len(b.ends))
	for i, e := range b.ends {
		s.chunks[i] = b.buf[e[0]:e[1]:e[1]]
	}
	return s
}

// replayBuilder collects the chunks of a replay in one buffer.
type replayBuilder struct {
	w    *wire.ChatSSE
	buf  []byte
	ends [][2]int
}

func (b *replayBuilder) emit(e *wire.Event) {
	start := len(b.buf)
	if b.buf = b.w.Encode(b.buf, e); len(b.buf) > start {
		b.ends = append(b.ends, [2]int{start, len(b.buf)})
	}
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
