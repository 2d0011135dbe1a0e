package guardrails

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/llmgw/gateway/pipeline"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// batch is how much text, in windows, a stream collects before it is
// judged: each judgement releases all but the last window, so every byte
// is scanned batch/(batch-1) times.
const batch = 3

// maxPending bounds the text a stream holds back: a match longer than this
// is not waited for.
const maxPending = 64 << 10

// Blocked is the error of a block action: it names the guardrail, never
// what it matched.
type Blocked struct{ Guardrail, Stage string }

func (b *Blocked) Error() string {
	return fmt.Sprintf("guardrail %q blocked the %s", b.Guardrail, stageNoun(b.Stage))
}

func stageNoun(stage string) string {
	switch stage {
	case StageRequest:
		return "request"
	case StageResponse:
		return "answer"
	case StageToolInput:
		return "tool call's arguments"
	}
	return "tool's result"
}

// clientError is the envelope of a block at the request or response stage.
func (b *Blocked) clientError() *pipeline.Error {
	e := pipeline.Invalid(http.StatusBadRequest, pipeline.CodeContentBlocked, "%s", b.Error())
	e.Err = b
	return e
}

// checker applies one stage's guards to the text of one request (or one
// tool call). For a stream it holds back the last window bytes, so a match
// split across chunks is still whole when it is judged; an http guard holds
// the whole text. Not safe for concurrent use.
type checker struct {
	ctx     context.Context
	guards  []*guard
	meta    *pipeline.Meta
	window  int
	holdAll bool
	fired   []*guard

	pending, out []byte
	spans        []span
	regions      []int
	runes        int  // runes released so far (max_length)
	cutoff       bool // a max_length redact cut the text: nothing more is released

	// What the judgements since the last Check did to the text, for its
	// logprobs (logprobs.go): base is how many bytes of the model's text
	// were judged and released, edits the redactions made in them, and
	// trunc where a max_length redact cut the text (when cutoff), each
	// counted in the model's text from the last Check.
	base  int
	edits []edit
	trunc int
}

func newChecker(ctx context.Context, guards []*guard, meta *pipeline.Meta) *checker {
	c := &checker{ctx: ctx, guards: guards, meta: meta}
	for _, g := range guards {
		c.window = max(c.window, g.window)
		c.holdAll = c.holdAll || g.http != nil
	}
	return c
}

// Feed takes the next fragment of a stream's text and returns what may be
// shown now (valid until the next call).
func (c *checker) Feed(text []byte) ([]byte, error) {
	c.pending = append(c.pending, text...)
	if c.holdAll && len(c.pending) <= maxPending || len(c.pending) < batch*c.window {
		return nil, nil
	}
	return c.release(false)
}

// Flush judges and returns the rest of a stream's text.
func (c *checker) Flush() ([]byte, error) { return c.release(true) }

// Check judges one whole text on its own (max_length counts it alone).
func (c *checker) Check(text []byte) ([]byte, error) {
	c.pending, c.runes, c.cutoff = append(c.pending[:0], text...), 0, false
	c.base, c.edits, c.trunc = 0, c.edits[:0], 0
	return c.release(true)
}

// CheckMore judges one whole text as the continuation of the texts judged
// since the last Check (the next text part of one message): max_length
// counts them together, and after a redact's cut nothing more is kept.
func (c *checker) CheckMore(text []byte) ([]byte, error) {
	c.pending = append(c.pending[:0], text...)
	return c.release(true)
}

func (c *checker) release(final bool) ([]byte, error) {
	text := c.pending
	if final || c.holdAll {
		for _, g := range c.guards {
			if g.http != nil && len(text) > 0 && g.http.flagged(c.ctx, text) {
				if err := c.fire(g); err != nil {
					return nil, err
				}
			}
		}
	}
	cut := len(text)
	if !final {
		cut = runeStart(text, len(text)-c.window)
	}
	c.spans = c.spans[:0]
	for _, g := range c.guards {
		c.spans, c.regions = g.find(text, c.spans, c.regions)
	}
	slices.SortFunc(c.spans, func(a, b span) int { return a.start - b.start })
	if !final {
		for moved := true; moved; { // a match across the cut waits whole
			moved = false
			for _, s := range c.spans {
				if s.start < cut && s.end > cut {
					cut, moved = s.start, true
				}
			}
		}
		if cut == 0 && len(text) > maxPending {
			cut = runeStart(text, len(text)-c.window)
		}
	}
	out, pos := c.out[:0], 0
	first := len(c.edits) // this judgement's edits
	for _, s := range c.spans {
		if s.end > cut {
			continue
		}
		if err := c.fire(s.g); err != nil {
			return nil, err
		}
		if s.g.action != actionRedact {
			continue
		}
		if s.start >= pos {
			out = append(out, text[pos:s.start]...)
			out = append(out, s.g.repl...)
			c.edits = append(c.edits, edit{c.base + s.start, c.base + s.end, s.g.repl})
		} else if s.end > pos {
			c.edits[len(c.edits)-1].end = c.base + s.end // overlapping matches: one redaction
		}
		pos = max(pos, s.end)
	}
	if pos < cut {
		out = append(out, text[pos:cut]...)
	}
	if c.cutoff {
		out = out[:0]
		c.edits = c.edits[:first]
	}
	for _, g := range c.guards {
		if g.kind != "max_length" {
			continue
		}
		n := utf8.RuneCount(out)
		if c.runes+n <= g.maxLen {
			continue
		}
		if err := c.fire(g); err != nil {
			return nil, err
		}
		if g.action == actionRedact {
			out = out[:runeOffset(out, g.maxLen-c.runes)]
			c.cutAt(len(out), first)
		}
	}
	c.runes += utf8.RuneCount(out)
	c.base += cut
	c.pending = append(c.pending[:0], text[cut:]...)
	c.out = out
	return out, nil
}

// cutAt notes a max_length cut of this judgement's output at k: where it
// falls in the model's text (trunc), with the edits from first on that it
// cuts off dropped, and one it cuts inside keeping its replacement's head.
func (c *checker) cutAt(k, first int) {
	out, orig := 0, c.base // the output written, and the model's text it stands for
	for i := first; i < len(c.edits); i++ {
		e := &c.edits[i]
		if k <= out+e.start-orig {
			c.edits = c.edits[:i]
			break
		}
		out += e.start - orig
		if k < out+len(e.repl) {
			e.repl = e.repl[:k-out]
			c.edits = c.edits[:i+1]
			out, orig = k, e.end
			break
		}
		out += len(e.repl)
		orig = e.end
	}
	c.trunc, c.cutoff = orig+k-out, true
}

// runeStart returns i moved back to the start of a rune (0 when negative).
func runeStart(b []byte, i int) int {
	if i <= 0 {
		return 0
	}
	for i > 0 && !utf8.RuneStart(b[i]) {
		i--
	}
	return i
}

// runeOffset returns the byte offset of the n-th rune of b (len(b) when b
// is shorter).
func runeOffset(b []byte, n int) int {
	for i := range string(b) {
		if n == 0 {
			return i
		}
		n--
	}
	return len(b)
}

// fire records that g matched: once per checker in the metrics, the
// request's trace and x-gateway-guardrails; a block returns *Blocked.
func (c *checker) fire(g *guard) error {
	if !slices.Contains(c.fired, g) {
		c.fired = append(c.fired, g)
		metricFired.WithLabelValues(g.name, g.stage, g.action).Inc()
		trace.SpanFromContext(c.ctx).AddEvent("guardrail", trace.WithAttributes(
			attribute.String("gateway.guardrail", g.name), attribute.String("gateway.guardrail.stage", g.stage),
			attribute.String("gateway.guardrail.action", g.action)))
		if c.meta != nil {
			names := c.meta.Get(headerFired)
			entry := g.name + ";" + g.action
			if !strings.Contains(","+names+",", ","+entry+",") {
				if names != "" {
					names += ","
				}
				c.meta.Set(headerFired, names+entry)
			}
		}
	}
	if g.action == actionBlock {
		return &Blocked{Guardrail: g.name, Stage: g.stage}
	}
	return nil
}

// headerFired lists the guardrails that fired, "name;action", comma
// separated (on a stream, only those before its headers were sent).
const headerFired = "x-gateway-guardrails"
