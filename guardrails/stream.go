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
// content and refusal go through a checker each, which holds back its
// window; held text comes out rewritten (with its logprobs, logprobs.go)
// in a chunk of its own before the choice's next tool call or finish, or
// at the end. A block ends the stream with the content_blocked error event.
type stream struct {
	src    pipeline.Stream
	ctx    context.Context
	guards []*guard
	meta   *pipeline.Meta
	texts  [maxChoices][nTexts]heldText // per choice: each of textKeys
	args   []*guard                     // the guards of tool calls' arguments (toolcalls.go)
	calls  [maxChoices][]heldCall       // per choice: its tool calls, held until it ends
	shown  [maxChoices]int              // per choice: the tool calls sent (the next one's index)
	// argBytes and nCalls count the arguments and the calls of the answer
	// (released ones too, so that the bounds, maxHeldArgs and maxHeldCalls,
	// hold the sum over all choices as the JSON answer's do); metaBytes,
	// what else calls keep (each call's first entry and chunk envelope),
	// has a bound of maxHeldArgs too, which no real answer nears.
	argBytes, nCalls, metaBytes int
	queue                       [][]byte
	spare                       [4][]byte // the queue's storage when it is short
	ended                       bool

	// Server calls of a Responses request (servercalls.go): held noted
	// them below; each goes to report once the text held before it has
	// been released, before the chunk that came after it (stashed).
	held    *heldCalls
	report  func(*pipeline.ServerCall)
	side    *checker // judges the chunks' side members (side.go), each string on its own
	due     []pipeline.ServerCall
	stashed bool
	failed  bool // the upstream's failure came: held text was released before it
	stash   []byte
	stashE  error
}

// textKeys are the delta (and message) members the response stage judges,
// in heldText order, which is also the order of the pieces a chunk that
// has several is judged in: the reasoning a model streams before its
// answer (DeepSeek's and vLLM's reasoning_content, or reasoning), the
// content, the refusal. The reasoning is text the client is shown as the
// answer's is, so a redaction or a block applies to it too.
var textKeys = [nTexts]string{"reasoning_content", "reasoning", "content", "refusal"}

const nTexts = 4

// nReasoning is how many of textKeys, the first ones, are reasoning.
const nReasoning = 2

// textPaths are the paths, in a choice, of each text, its logprobs list
// and that list's first item: built once, not per chunk;
// chunkLogprobs is the logprobs list's path in a one-choice chunk. The
// reasoning has no logprobs list: its paths are "".
var textPaths = [nTexts]struct{ delta, logprobs, first, chunkLogprobs string }{
	{"delta.reasoning_content", "", "", ""},
	{"delta.reasoning", "", "", ""},
	{"delta.content", "logprobs.content", "logprobs.content.0", "choices.0.logprobs.content"},
	{"delta.refusal", "logprobs.refusal", "logprobs.refusal.0", "choices.0.logprobs.refusal"},
}

// heldText is one text of a choice as a stream judges it.
type heldText struct {
	ck   *checker
	tmpl []byte // a held chunk of the text, for the chunks of released text
	lp   heldLogprobs
}

func newStream(ctx context.Context, src pipeline.Stream, guards []*guard, meta *pipeline.Meta) *stream {
	return &stream{src: src, ctx: ctx, guards: guards, meta: meta, args: argGuards(guards)}
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
				for i := range s.texts {
					ferr := s.flushChoice(i)
					if ferr == nil {
						ferr = s.releaseCalls(i)
					}
					if ferr != nil {
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
			for i := range s.texts {
				if err := s.flushChoice(i); err != nil {
					return nil, err
				}
				if err := s.releaseCalls(i); err != nil {
					return nil, err
				}
			}
			continue
		}
		if err != nil && !s.failed && s.ctx.Err() == nil { // a client that left is told nothing (an http guardrail would fail closed on its context)
			// The upstream failed: the text held back for judging (a
			// match may span chunks) is judged as it stands and goes out
			// before the failure, as it would have without a guardrail;
			// dropped, a client that saw it nothing of it lost it.
			s.failed = true
			for i := range s.texts {
				if ferr := s.flushChoice(i); ferr != nil {
					return nil, ferr
				}
			}
			if len(s.queue) > 0 {
				s.stash, s.stashE, s.stashed = nil, err, true
				continue
			}
		}
		if err != nil || len(chunk) == 0 || chunk[0] == ':' {
			return chunk, err
		}
		if s.side == nil {
			s.side = newChecker(s.ctx, sideGuards(s.guards), s.meta)
		}
		if len(s.side.guards) > 0 {
			if out, err := checkSide(s.side, chunk, "delta"); err != nil {
				return nil, asClientError(err)
			} else if out != nil {
				chunk = out
			}
		}
		if gjson.GetBytes(chunk, "choices.1").Exists() ||
			gjson.GetBytes(chunk, "choices.0").Exists() && gjson.GetBytes(chunk, "usage").IsObject() {
			// Several choices in one chunk: each is judged as a chunk of
			// its own, as the upstreams that stream n > 1 send them; a
			// usage with a choice goes after it on a chunk of its own.
			if err := s.splitChoices(chunk); err != nil {
				return nil, asClientError(err)
			}
			continue
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

// chunk handles one chunk; nil drops it (its text is held). Its tool
// calls are held (toolcalls.go), and go out, judged, before its choice's
// finish.
func (s *stream) chunk(chunk []byte) ([]byte, error) {
	// A read-only view: nothing taken from it outlives this call (Feed
	// copies the text).
	ch := gjson.Get(unsafe.String(unsafe.SliceData(chunk), len(chunk)), "choices.0")
	if !ch.IsObject() {
		// The usage chunk comes last: whatever a choice that ended without
		// a finish left held goes out before it.
		if gjson.GetBytes(chunk, "usage").IsObject() {
			for i := range s.texts {
				if err := s.flushChoice(i); err != nil {
					return nil, err
				}
				if err := s.releaseCalls(i); err != nil {
					return nil, err
				}
			}
		}
		return chunk, nil
	}
	i := int(ch.Get("index").Int())
	if i < 0 || i >= maxChoices {
		return nil, nil
	}
	hadCalls := carriesCalls(ch)
	if hadCalls && len(s.args) > 0 {
		var err error
		if chunk, err = s.holdCalls(chunk, ch, i); err != nil {
			return nil, err
		}
		ch = gjson.GetBytes(chunk, "choices.0")
	}
	finish := wire.FinishReason(ch)
	if len(s.calls[i]) == 0 {
		return s.judgeTexts(chunk, ch, i, hadCalls || finish != "")
	}
	if finish == "" {
		// Not an end of the texts: the calls are held, so text after them
		// goes out before them anyway, and a match across a call is one
		// text, as in the JSON answer's content.
		out, err := s.judgeTexts(chunk, ch, i, false)
		if err != nil || out == nil || strings.TrimSpace(gjson.GetBytes(out, "choices.0.delta").Raw) != "{}" {
			return out, err
		}
		return nil, nil // it had only calls
	}
	// The end of a choice with calls held: its texts, then the calls, then
	// the finish on a chunk of its own.
	body, err := sjson.SetRawBytes(chunk, "choices.0.finish_reason", []byte("null"))
	if err != nil {
		return nil, err
	}
	out, err := s.judgeTexts(body, gjson.GetBytes(body, "choices.0"), i, true)
	if err != nil {
		return nil, err
	}
	if out != nil && strings.TrimSpace(gjson.GetBytes(out, "choices.0.delta").Raw) != "{}" {
		s.queue = append(s.queue, out)
	}
	if err := s.releaseCalls(i); err != nil {
		return nil, err
	}
	end, err := sjson.SetRawBytes(chunk, "choices.0.delta", []byte("{}"))
	if err == nil && ch.Get("logprobs").Exists() {
		end, err = sjson.SetRawBytes(end, "choices.0.logprobs", []byte("null"))
	}
	return end, err
}

// splitChoices handles each choice of chunk as a chunk of its own, with
// the rest of chunk's envelope, and queues what comes out. A usage of
// chunk goes on none of them (a piece whose text is held would drop it,
// or the template of its text keep it for the flush too), and it follows
// them on a usage chunk of its own ("choices":[]), after every choice's
// held text and calls, as the usage chunk of a stream comes. (A usage that
// is not an object, null, stays on the last piece.)
func (s *stream) splitChoices(chunk []byte) error {
	choices := gjson.GetBytes(chunk, "choices").Array()
	usage := gjson.GetBytes(chunk, "usage").IsObject()
	envelope, err := sjson.DeleteBytes(chunk, "usage")
	if err != nil {
		return err
	}
	for n, ch := range choices {
		base := envelope
		if n == len(choices)-1 && !usage {
			base = chunk
		}
		part, err := sjson.SetRawBytes(base, "choices", []byte("["+ch.Raw+"]"))
		if err != nil {
			return err
		}
		out, err := s.chunk(part)
		if err != nil {
			return err
		}
		if out != nil {
			s.queue = append(s.queue, out)
		}
	}
	if !usage {
		return nil
	}
	last, err := sjson.SetRawBytes(chunk, "choices", []byte("[]"))
	if err != nil {
		return err
	}
	out, err := s.chunk(last) // flushes every choice, then the usage
	if err != nil {
		return err
	}
	s.queue = append(s.queue, out)
	return nil
}

// judgeTexts handles chunk's texts (ch its choice, i its index; ends: the
// choice's texts end with it); nil drops it. A chunk with several texts
// (a reasoning and a content, a content and a refusal) is judged as one
// piece per text, in textKeys order; only the first piece keeps the role,
// and only the last the tool calls and the finish.
func (s *stream) judgeTexts(chunk []byte, ch gjson.Result, i int, ends bool) ([]byte, error) {
	delta := ch.Get("delta")
	var has [nTexts]bool
	var present [nTexts]int
	n := 0
	for k, key := range textKeys {
		// A text of "" whose tokens have logprobs (a token that is part
		// of a character: its bytes, no text yet) has them held in their
		// place too: let out as they came, before the text held, they
		// went out of order and left the tokens after them misplaced,
		// so a redaction missed the one it touched.
		t := delta.Get(key)
		if has[k] = t.Type == gjson.String && t.Str != ""; !has[k] && textPaths[k].first != "" {
			has[k] = ch.Get(textPaths[k].first).Exists()
		}
		if has[k] {
			present[n] = k
			n++
		}
	}
	if n == 0 {
		if ends {
			if err := s.flushChoice(i); err != nil {
				return nil, err
			}
		}
		return chunk, nil
	}
	// flushReasoning lets out the reasoning held back, before the answer's
	// text that follows it (in this chunk or a later one) goes out.
	flushReasoning := func() error {
		for k := range nReasoning {
			if err := s.flush(i, k); err != nil {
				return err
			}
		}
		return nil
	}
	if present[0] >= nReasoning {
		if err := flushReasoning(); err != nil {
			return nil, err
		}
	}
	lps := ch.Get("logprobs").IsObject() // each piece with its own list
	// piece is chunk with only text k of the ones it has (first: with the
	// role; last: with the calls and the finish).
	piece := func(k int, first, last bool) ([]byte, error) {
		var err error
		out := chunk
		for _, o := range present[:n] {
			if o == k {
				continue
			}
			if out, err = sjson.DeleteBytes(out, "choices.0.delta."+textKeys[o]); err != nil {
				return nil, err
			}
			if lps && textPaths[o].chunkLogprobs != "" {
				if out, err = sjson.SetRawBytes(out, textPaths[o].chunkLogprobs, []byte("null")); err != nil {
					return nil, err
				}
			}
		}
		if !first {
			if out, err = sjson.DeleteBytes(out, "choices.0.delta.role"); err != nil {
				return nil, err
			}
		}
		if !last {
			if out, err = sjson.DeleteBytes(out, "choices.0.delta.tool_calls"); err == nil {
				out, err = sjson.SetRawBytes(out, "choices.0.finish_reason", []byte("null"))
			}
		}
		return out, err
	}
	for j, k := range present[:n-1] {
		p, err := piece(k, j == 0, false)
		if err != nil {
			return nil, err
		}
		out, err := s.text(p, gjson.GetBytes(p, "choices.0"), i, k, false)
		if err != nil {
			return nil, err
		}
		if out != nil {
			s.queue = append(s.queue, out)
		}
		if ends {
			if err := s.flush(i, k); err != nil {
				return nil, err
			}
		}
		if k < nReasoning && present[j+1] >= nReasoning {
			// The chunk's reasoning is judged; its answer text comes next.
			if err := flushReasoning(); err != nil {
				return nil, err
			}
		}
	}
	if ends {
		// The texts this chunk does not have end before its last one.
		for k := range textKeys {
			if !has[k] {
				if err := s.flush(i, k); err != nil {
					return nil, err
				}
			}
		}
	}
	last := present[n-1]
	if n == 1 {
		return s.text(chunk, ch, i, last, ends)
	}
	p, err := piece(last, false, true)
	if err != nil {
		return nil, err
	}
	return s.text(p, gjson.GetBytes(p, "choices.0"), i, last, ends)
}

// text handles chunk (ch its choice) for choice i's text k, which it has;
// nil drops it. Text that went out as nothing but whose tokens' logprobs
// are let out (the run a redaction to "" leaves) goes as "".
func (s *stream) text(chunk []byte, ch gjson.Result, i, k int, ends bool) ([]byte, error) {
	key := textKeys[k]
	h := &s.texts[i][k]
	if h.tmpl == nil {
		h.tmpl = append([]byte(nil), chunk...)
	}
	if h.ck == nil {
		h.ck = newChecker(s.ctx, s.guards, s.meta)
	}
	content := ch.Get(textPaths[k].delta)
	text := unsafe.Slice(unsafe.StringData(content.Str), len(content.Str))
	lp := &h.lp
	before := len(lp.toks)
	var list gjson.Result
	if textPaths[k].logprobs != "" {
		list = ch.Get(textPaths[k].logprobs)
	}
	lp.hold(list, len(text))
	out, err := h.ck.Feed(text)
	if err != nil {
		return nil, err
	}
	if ends {
		rest, err := h.ck.Flush()
		if err != nil {
			return nil, err
		}
		out = append(out, rest...)
	}
	lp.note(h.ck)
	items, all, changed := lp.release(h.ck.base, ends)
	switch {
	case len(out) == 0 && !ends && !ch.Get("delta.role").Exists() && items == "":
		return nil, nil
	case bytes.Equal(out, text) && before == 0 && all && !changed:
		return chunk, nil // as it came, with its own logprobs
	}
	c, err := sjson.SetBytes(chunk, "choices.0.delta."+key, string(out))
	if err != nil || !lp.seen {
		return c, err
	}
	return sjson.SetRawBytes(c, "choices.0.logprobs", logprobsJSON(key, items))
}

// flushChoice queues choice i's held texts.
func (s *stream) flushChoice(i int) error {
	for k := range textKeys {
		if err := s.flush(i, k); err != nil {
			return err
		}
	}
	return nil
}

// flush queues choice i's held text k as a chunk of its own, with its
// tokens' logprobs (the text "" when it went out as nothing but has some).
func (s *stream) flush(i, k int) error {
	h := &s.texts[i][k]
	if h.ck == nil {
		return nil
	}
	out, err := h.ck.Flush()
	if err != nil {
		return asClientError(err)
	}
	if h.tmpl == nil {
		return nil
	}
	lp := &h.lp
	lp.note(h.ck)
	items, _, _ := lp.release(h.ck.base, true)
	if len(out) == 0 && items == "" {
		return nil
	}
	key := textKeys[k]
	delta := jsonstring.Append([]byte(`{"`+key+`":`), string(out))
	c, err := sjson.SetRawBytes(h.tmpl, "choices.0.delta", append(delta, '}'))
	if err != nil {
		return err
	}
	if lp.seen {
		if c, err = sjson.SetRawBytes(c, "choices.0.logprobs", logprobsJSON(key, items)); err != nil {
			return err
		}
	}
	s.queue = append(s.queue, c)
	return nil
}

// Close closes the source.
func (s *stream) Close() { s.src.Close() }
