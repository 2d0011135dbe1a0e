package toolprompt

import (
	"cmp"
	"context"
	"crypto/rand"
	"io"
	"sync"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
	"github.com/tidwall/gjson"
)

func newCallID() string { return "call_" + rand.Text() }

// stream re-streams a prompted model's chunks as native ones: text before a
// call block is forwarded as it comes (all of it is held when the reply must
// be judged whole: a required tool, the json_schema format); at the end the
// block becomes tool-call chunks, or the model is asked again.
type stream struct {
	h    *handler
	ctx  context.Context
	up   *pipeline.Request
	rw   *rewritten
	hold bool

	mu     sync.Mutex // guards src and closed against Close
	src    pipeline.Stream
	closed bool

	enc     *wire.ChatSSE
	dec     wire.ChunkDecoder
	sc      Scanner
	text    []byte // this attempt's content
	native  bool   // the upstream sent tool calls of its own
	refused bool   // this attempt's reply holds a refusal
	finish  string
	usage   []byte // the usage of the attempts before this one, summed
	last    []byte // this attempt's last usage: some upstreams send running totals
	tries   tries

	queue [][]byte
	done  bool
}

func (h *handler) newStream(ctx context.Context, up *pipeline.Request, rw *rewritten, src pipeline.Stream) *stream {
	return &stream{h: h, ctx: ctx, up: up, rw: rw, src: src, hold: h.holds(rw)}
}

// Next returns the next chunk.
func (s *stream) Next() ([]byte, error) {
	for {
		if len(s.queue) > 0 {
			c := s.queue[0]
			s.queue = s.queue[1:]
			return c, nil
		}
		if s.done {
			return nil, io.EOF
		}
		s.mu.Lock()
		src := s.src
		s.mu.Unlock()
		chunk, err := src.Next()
		if err == io.EOF {
			if err := s.endAttempt(); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if len(chunk) > 0 && chunk[0] == ':' {
			return chunk, nil // keep-alive comments pass
		}
		if s.enc == nil {
			s.enc = wire.NewChatSSE(headerOf(chunk, gjson.GetBytes(s.up.Body, "stream_options.include_usage").Bool()))
		}
		s.dec.Decode(chunk, s.onEvent)
	}
}

func (s *stream) emit(e *wire.Event) {
	if c := s.enc.Encode(nil, e); len(c) > 0 {
		s.queue = append(s.queue, c)
	}
}

func (s *stream) onEvent(e *wire.Event) {
	switch e.Kind {
	case wire.Text:
		if e.Key != "content" {
			s.refused = s.refused || e.Key == "refusal" && len(e.Text) > 0
			s.emit(e)
			return
		}
		if len(s.text)+len(e.Text) <= maxBlock*2 {
			s.text = append(s.text, e.Text...)
		}
		if s.hold {
			return
		}
		if live := s.sc.Feed(e.Text); len(live) > 0 {
			s.emit(&wire.Event{Kind: wire.Text, Key: "content", Text: live})
		}
	case wire.CallHeader, wire.CallArgs:
		s.native = true
		s.emit(e)
	case wire.Finish:
		s.finish = e.Finish
	case wire.Usage:
		s.last = append(s.last[:0], e.Raw...)
	case wire.Extra:
		// A reply's annotations point into its own text, which the
		// prompt's protocol rewrites (and a re-ask replaces): left out,
		// as the prompted form has always shown none.
	default:
		s.emit(e)
	}
}

// endAttempt judges the reply that just ended: it queues the rest of the
// answer, or starts the next attempt.
func (s *stream) endAttempt() error {
	if s.enc == nil { // an empty stream: nothing to judge
		s.done = true
		return nil
	}
	if len(s.last) > 0 {
		s.usage = addUsage(s.usage, gjson.ParseBytes(s.last))
		s.last = s.last[:0]
	}
	if s.native {
		// The model called natively after all: its text is the answer's
		// as written, as the JSON form returns it, so the text the
		// scanner held back (a block, a fence's start) goes out too.
		shown := 0
		if !s.hold {
			shown = s.sc.Released()
		}
		if tail := s.text[min(shown, len(s.text)):]; len(tail) > 0 {
			s.emit(&wire.Event{Kind: wire.Text, Key: "content", Text: tail})
		}
		s.emit(&wire.Event{Kind: wire.Finish, Finish: s.finish})
		s.finishUsage()
		return nil
	}
	var o *outcome
	if s.hold {
		o = s.h.read(s.text, s.refused)
	} else {
		tail, found, calls, err := s.sc.End()
		o = &outcome{text: s.text, shown: tail, found: found, calls: calls, err: err}
	}
	o.upstreamEnd(s.finish, s.usage, s.rw.cap)
	retry, err := s.h.judge(s.ctx, s.up, s.rw, o, &s.tries)
	if err != nil {
		return err
	}
	if retry == "" {
		if !s.hold && o.err != nil && !o.cut && !o.spent { // gave up on a malformed block: show the rest
			o.shown = o.text[min(s.sc.Released(), len(o.text)):]
		}
		for _, e := range events(o, cmp.Or(o.finish, s.finish), nil)[1:] { // the role is out
			s.emit(&e)
		}
		s.finishUsage()
		return nil
	}
	up, err := reask(s.up, o.text, retry, s.rw.cap, o.used)
	if err != nil {
		return pipeline.Internal(err, "the request could not be extended")
	}
	resp, err := s.h.next.Chat(s.ctx, up)
	if err != nil {
		return err
	}
	if resp.Stream == nil {
		return pipeline.Internal(nil, "the upstream answered a stream request with JSON")
	}
	s.mu.Lock()
	old, closed := s.src, s.closed
	s.src = resp.Stream
	s.mu.Unlock()
	old.Close()
	if closed {
		resp.Stream.Close()
		return context.Canceled
	}
	s.up, s.dec, s.sc, s.text, s.finish, s.refused = up, wire.ChunkDecoder{}, Scanner{}, nil, "", false
	return nil
}

func (s *stream) finishUsage() {
	if len(s.usage) > 0 {
		s.emit(&wire.Event{Kind: wire.Usage, Raw: s.usage})
	}
	s.done = true
}

// Close closes the upstream stream; safe from any goroutine.
func (s *stream) Close() {
	s.mu.Lock()
	s.closed = true
	src := s.src
	s.mu.Unlock()
	src.Close()
}
