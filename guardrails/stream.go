package guardrails

import (
	"bytes"
	"context"
	"io"
	"strings"
	"unsafe"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// maxChoices bounds the choices a stream is checked for (n > 1); content of
// a choice past it is held to nothing rather than passed unchecked.
const maxChoices = 16

// stream runs the response stage over a chunk stream: each choice's
// content goes through its checker, which holds back its window; held text
// comes out rewritten in a content chunk of its own before the choice's
// next tool call or finish, or at the end. A block ends the stream with
// the content_blocked error event.
type stream struct {
	src    pipeline.Stream
	ctx    context.Context
	guards []*guard
	meta   *pipeline.Meta
	checks [maxChoices]*checker
	tmpl   [maxChoices][]byte // a held content chunk of the choice, for the chunks of released text
	lps    [maxChoices]heldLogprobs
	queue  [][]byte
	spare  [4][]byte // the queue's storage when it is short
	ended  bool

	// Server calls of a Responses request (servercalls.go): held noted
	// them below; each goes to report once the text held before it has
	// been released, before the chunk that came after it (stashed).
	held    *heldCalls
	report  func(*pipeline.ServerCall)
	due     []pipeline.ServerCall
	stashed bool
	stash   []byte
	stashE  error
}

func newStream(ctx context.Context, src pipeline.Stream, guards []*guard, meta *pipeline.Meta) *stream {
	return &stream{src: src, ctx: ctx, guards: guards, meta: meta}
}

// Next returns the next chunk, rewritten.
func (s *stream) Next() ([]byte, error) {
	for {
		if len(s.queue) > 0 {
			c := s.queue[0]
			if s.queue = s.queue[1:]; len(s.queue) == 0 {
				s.queue = s.spare[:0]
			}
			return c, nil
		}
		if len(s.due) > 0 {
			for i := range s.due {
				s.report(&s.due[i])
			}
			s.due = nil
		}
		var chunk []byte
		var err error
		switch {
		case s.stashed:
			chunk, err, s.stash, s.stashE, s.stashed = s.stash, s.stashE, nil, nil, false
		case s.ended:
			return nil, io.EOF
		default:
			chunk, err = s.src.Next()
			if calls := s.held.take(); len(calls) > 0 {
				// The text before the calls is complete: judge and
				// release it first, then report them.
				for i := range s.checks {
					if ferr := s.flush(i); ferr != nil {
						// A block: the calls ran all the same, and
						// are reported before the error ends the
						// stream, as without a guardrail.
						for j := range calls {
							s.report(&calls[j])
						}
						return nil, ferr
					}
				}
				s.due, s.stash, s.stashE, s.stashed = calls, chunk, err, true
				continue
			}
		}
		if err == io.EOF {
			s.ended = true
			for i := range s.checks {
				if err := s.flush(i); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err != nil || len(chunk) == 0 || chunk[0] == ':' {
			return chunk, err
		}
		out, err := s.chunk(chunk)
		if err != nil {
			return nil, asClientError(err)
		}
		if out != nil && len(s.queue) == 0 {
			return out, nil
		}
		if out != nil {
			s.queue = append(s.queue, out)
		}
	}
}

// chunk handles one chunk; nil drops it (its text is held). Text that
// went out as nothing (a max_length redact's cut) still gives its tokens'
// logprobs to the chunk, whose content is then "".
func (s *stream) chunk(chunk []byte) ([]byte, error) {
	// A read-only view: nothing taken from it outlives this call (Feed
	// copies the text).
	ch := gjson.Get(unsafe.String(unsafe.SliceData(chunk), len(chunk)), "choices.0")
	if !ch.IsObject() {
		return chunk, nil // the usage chunk: every finish came before it
	}
	i := int(ch.Get("index").Int())
	if i < 0 || i >= maxChoices {
		return nil, nil
	}
	delta := ch.Get("delta")
	content, role := delta.Get("content"), delta.Get("role").Exists()
	ends := delta.Get("tool_calls").Exists() || wire.FinishReason(ch) != ""
	if content.Type != gjson.String || content.Str == "" {
		if ends {
			if err := s.flush(i); err != nil {
				return nil, err
			}
		}
		return chunk, nil
	}
	if s.tmpl[i] == nil {
		s.tmpl[i] = append([]byte(nil), chunk...)
	}
	ck := s.checker(i)
	text := unsafe.Slice(unsafe.StringData(content.Str), len(content.Str))
	lp := &s.lps[i]
	lp.hold(len(text), ch.Get("logprobs.content"))
	out, err := ck.Feed(text)
	if err != nil {
		return nil, err
	}
	if ends {
		rest, err := ck.Flush()
		if err != nil {
			return nil, err
		}
		out = append(out, rest...)
	}
	items, own := lp.release(len(ck.pending))
	switch {
	case len(out) == 0 && !ends && !role && items == "":
		return nil, nil
	case bytes.Equal(out, text) && own:
		return chunk, nil
	}
	c, err := sjson.SetBytes(chunk, "choices.0.delta.content", string(out))
	if err != nil || !lp.seen {
		return c, err
	}
	return sjson.SetRawBytes(c, "choices.0.logprobs", logprobsJSON(items))
}

// flush queues choice i's held text as a content chunk, with its tokens'
// logprobs (content "" when the text went out as nothing but had some).
func (s *stream) flush(i int) error {
	ck := s.checks[i]
	if ck == nil {
		return nil
	}
	out, err := ck.Flush()
	if err != nil {
		return asClientError(err)
	}
	if s.tmpl[i] == nil {
		return nil
	}
	lp := &s.lps[i]
	var items string
	if lp.seen {
		items, _ = lp.release(0)
	}
	if len(out) == 0 && items == "" {
		return nil
	}
	delta := jsonstring.Append([]byte(`{"content":`), string(out))
	c, err := sjson.SetRawBytes(s.tmpl[i], "choices.0.delta", append(delta, '}'))
	if err != nil {
		return err
	}
	if lp.seen {
		if c, err = sjson.SetRawBytes(c, "choices.0.logprobs", logprobsJSON(items)); err != nil {
			return err
		}
	}
	s.queue = append(s.queue, c)
	return nil
}

// heldLogprobs keeps the logprobs of a choice's held text: they go out
// with the text, on the chunk that releases the last of their chunk's
// text, so that the stream carries every token's logprobs once, in order,
// as the JSON answer does.
type heldLogprobs struct {
	seen  bool     // a chunk of the choice had logprobs
	fed   int      // bytes of text held so far
	ends  []int    // per held chunk: fed after its text
	items []string // per held chunk: its logprobs.content items, joined (may be empty)
}

// hold notes a chunk of n bytes of text with its logprobs.content.
func (h *heldLogprobs) hold(n int, content gjson.Result) {
	raw := ""
	if content.IsArray() {
		raw = strings.TrimSpace(content.Raw)
		// A copy: content is a view of a chunk that is reused.
		raw = strings.Clone(strings.TrimSpace(raw[1 : len(raw)-1]))
		h.seen = true
	}
	h.fed += n
	h.ends = append(h.ends, h.fed)
	h.items = append(h.items, raw)
}

// release returns the items of the chunks whose text is out, now that
// pending bytes are still held, joined; own reports that they are the
// items of the last chunk held alone (that chunk goes out as it came).
func (h *heldLogprobs) release(pending int) (items string, own bool) {
	out := h.fed - pending
	n := 0
	for n < len(h.ends) && h.ends[n] <= out {
		n++
	}
	own = n == 1 && len(h.ends) == 1
	var parts []string
	for _, it := range h.items[:n] {
		if it != "" {
			parts = append(parts, it)
		}
	}
	h.ends, h.items = h.ends[n:], h.items[n:]
	if len(h.ends) == 0 {
		h.ends, h.items = h.ends[:0], h.items[:0]
	}
	return strings.Join(parts, ","), own || (n == 0 && !h.seen)
}

// logprobsJSON is a chunk's logprobs member for content items.
func logprobsJSON(items string) []byte {
	if items == "" {
		return []byte("null")
	}
	return []byte(`{"content":[` + items + `],"refusal":null}`)
}

func (s *stream) checker(i int) *checker {
	if s.checks[i] == nil {
		s.checks[i] = newChecker(s.ctx, s.guards, s.meta)
	}
	return s.checks[i]
}

// Close closes the source.
func (s *stream) Close() { s.src.Close() }
