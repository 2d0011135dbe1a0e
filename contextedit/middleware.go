package contextedit

import (
	"bytes"
	"context"
	"math"
	"net/http"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// MetaHeader is the response header that reports the edits of one client
// request: "cleared=N;tokens_saved=M" (";dropped=K" when turns were dropped).
const MetaHeader = "x-gateway-context-edits"

// Options configure the middleware.
type Options struct {
	Config config.ContextEdit // used as given: config applies the defaults (config.ApplyDefaults)
	Logger zerolog.Logger

	// For last_resort = "summarize": the routes (to reach the summary
	// model), whether the caller's policy lets it use a model (asked before
	// a stored summary is reused), the caller's admission (policy, limits,
	// budgets) applied to a summary call when one is made, and the store
	// summaries are kept in.
	Lookup func(model string) *pipeline.Route
	Allows func(t *pipeline.Tenant, model string) bool
	Admit  func(*pipeline.Request) error
	Store  Store
}

// settings is Options.Config made safe to use.
type settings struct {
	trigger      float64 // tokens when > 1, else a fraction of the window
	keep         int
	clearAtLeast int
	exclude      map[string]bool
	placeholder  string
	clearInputs  bool
	dropTurns    bool        // last resort, or what summarize falls back to
	summarize    *summarizer // last_resort = "summarize"
}

func newSettings(c config.ContextEdit) settings {
	s := settings{
		trigger:      c.Trigger,
		keep:         max(c.Keep, 0),
		clearAtLeast: max(c.ClearAtLeast, 0),
		exclude:      map[string]bool{},
		placeholder:  c.Placeholder,
		clearInputs:  c.ClearToolInputs,
		dropTurns:    c.LastResort == "drop_turns" || (c.LastResort == "summarize" && c.SummaryFallback == "drop_turns"),
	}
	for _, n := range c.ExcludeTools {
		s.exclude[n] = true
	}
	return s
}

// New returns the context-editing middleware of the model-call layer. It runs
// once per upstream call with the window of the Route of the request it gets
// (the fallback middleware calls each route's own chain, so a fallback model
// is edited for its own window). The handler it returns is safe for
// concurrent use. It never modifies req.Body: an edited body is a new slice on
// a clone of the request.
func New(opts Options) pipeline.Middleware {
	s := newSettings(opts.Config)
	if c := opts.Config; c.LastResort == "summarize" {
		s.summarize = &summarizer{model: c.SummaryModel, prompt: c.SummaryPrompt, lookup: opts.Lookup, allows: opts.Allows,
			admit: opts.Admit, store: opts.Store}
	}
	return func(next pipeline.Handler) pipeline.Handler {
		return &handler{next: next, s: s, log: opts.Logger}
	}
}

type handler struct {
	next pipeline.Handler
	s    settings
	log  zerolog.Logger
}

// budget holds the token limits of one call; 0 means unknown.
type budget struct {
	window  int // the route's context window
	trigger int // editing starts above this
	limit   int // the window less the requested output: above it the upstream fails
	target  int // min(trigger, limit): what editing aims for
}

func (h *handler) budget(req *pipeline.Request) budget {
	window := 0
	if req.Route != nil {
		window = req.Route.ContextWindow
	}
	b := budget{window: window}
	switch {
	case h.s.trigger > 1:
		b.trigger = int(min(h.s.trigger, math.MaxInt32))
	case window > 0:
		b.trigger = int(h.s.trigger * float64(window))
	}
	if window > 0 {
		b.limit = window
		out := req.Field(pipeline.FieldMaxCompletionTokens).Int()
		if out <= 0 {
			out = req.Field(pipeline.FieldMaxTokens).Int()
		}
		if out > 0 && out < int64(window) {
			b.limit = window - int(out)
		}
	}
	b.target = b.trigger
	if b.limit > 0 && (b.target <= 0 || b.limit < b.target) {
		b.target = b.limit
	}
	return b
}

// cheapBound returns an upper bound of the tokens Count would return for
// body, or -1 when it cannot give one. Byte-level BPE maps every token to at
// least one byte of the text it encodes, so a valid UTF-8 string never has
// more tokens than bytes; a JSON string's escaped form is never shorter than
// its text; the fixed costs the cookbook adds (3 per message, 1 per name, 3
// per tool call, 3 for priming) are each covered by JSON syntax bytes that are
// never counted as text (braces, separators, key quotes). Only images cost
// more than their bytes: each image part holds "image_url" at least once.
// Invalid UTF-8 is re-encoded by the tokenizer as U+FFFD (3 bytes) and breaks
// the argument, so it gets no bound.
func cheapBound(body []byte) int {
	if !utf8.Valid(body) {
		return -1
	}
	return len(body) + tokensPerImage*bytes.Count(body, []byte("image_url"))
}

// Chat edits req when it is over budget and calls next.
func (h *handler) Chat(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
	b := h.budget(req)
	if b.target <= 0 {
		return h.next.Chat(ctx, req) // no window and no absolute trigger: nothing to aim for
	}
	elog := editLogOf(req)
	if elog.empty() {
		bound := cheapBound(req.Body)
		if bound >= 0 && elog != nil {
			// With a prompt hint, edit counts the upstream's tokens for the
			// prefix plus ours for the rest: the body's bytes bound the rest.
			bound += max(req.PromptHint.Tokens, 0)
		}
		if bound >= 0 && bound <= b.target {
			skippedCalls.Get(routeName(req)).Inc()
			return h.next.Chat(ctx, req)
		}
	}
	enc := ""
	if req.Route != nil {
		enc = req.Route.Encoding
	}
	c, err := CounterFor(enc)
	if err != nil {
		h.log.Error().Err(err).Str("route", routeName(req)).Msg("context editing disabled for the request")
		return h.next.Chat(ctx, req)
	}
	out, err := h.edit(ctx, req, c, b, elog)
	if err != nil {
		return nil, err
	}
	return h.next.Chat(ctx, out)
}

// edit applies the logged edits and decides new ones. It returns req itself
// when no byte changes, else a clone with a new Body.
func (h *handler) edit(ctx context.Context, req *pipeline.Request, c *Counter, b budget, elog *EditLog) (*pipeline.Request, error) {
	var hint pipeline.PromptHint
	if elog != nil {
		hint = req.PromptHint // only valid when the prefix is edited as last round
	} else {
		elog = &EditLog{} // this call only
	}
	elog.mu.Lock()
	defer elog.mu.Unlock()

	route := routeName(req)
	t, err := parse(req.Body, c)
	if err != nil {
		return req, nil // ingress validated the body; not ours to reject
	}
	elog.reapply(t)
	count := t.count(hint)
	before := count

	var cleared []int
	saved := 0
	if count > b.target {
		cleared = h.planClears(t, count, b)
		for _, i := range cleared {
			saved += t.clear(i, h.s.placeholder, h.s.clearInputs)
		}
		count -= saved
	}
	outcome := outcomeUnder
	if len(cleared) > 0 {
		outcome = outcomeCleared
	}
	var dropped []uint64
	summary := ""
	var summaryErr error
	if b.limit > 0 && count > b.limit && h.s.summarize != nil {
		// Summarise the turns a drop would remove, and keep their summary
		// in their place; fall back below when that is not possible.
		if cut, after := t.planDrop(count, b.target); cut >= 0 {
			withSummary := func(msg string) int { return after + c.CountText(msg) + 4 }
			fits := func(text string) bool { return withSummary(summaryMessage(text)) <= b.limit }
			room := b.limit - withSummary(summaryMessage(""))
			text, err := h.s.summarize.summary(ctx, req, t, cut, room, fits)
			summaryErr = err
			if err == nil {
				msg := summaryMessage(text)
				metricLastResort.WithLabelValues(route, "summarize").Inc()
				dropped = t.drop(cut)
				t.insert(cut, msg)
				summary = msg
				n := withSummary(msg)
				saved += count - n
				count = n
				outcome = outcomeDropped
			} else {
				metricLastResort.WithLabelValues(route, "summarize_failed").Inc()
				h.log.Warn().Err(err).Str("route", route).Str("summary_model", h.s.summarize.model).Msg("context could not be summarised")
			}
		}
	}
	if b.limit > 0 && count > b.limit {
		if !h.s.dropTurns {
			metricLastResort.WithLabelValues(route, "error").Inc()
			metricCalls.WithLabelValues(route, outcomeRejected).Inc()
			if err := limited(summaryErr); err != nil {
				// The summary call was refused by the caller's rate limits
				// or budgets: that, not the conversation's length, is what
				// the client can act on (wait and retry).
				return nil, err
			}
			return nil, req.Messages.ClientError(exceeded(b, count, saved > 0))
		}
		cut, after := t.planDrop(count, b.target)
		if cut < 0 || after > b.limit {
			metricLastResort.WithLabelValues(route, "drop_failed").Inc()
			metricCalls.WithLabelValues(route, outcomeRejected).Inc()
			return nil, req.Messages.ClientError(exceeded(b, after, saved > 0 || after < count))
		}
		metricLastResort.WithLabelValues(route, "drop_turns").Inc()
		dropped = t.drop(cut)
		saved += count - after
		count = after
		outcome = outcomeDropped
	}

	elog.record(t, cleared, h.s.placeholder, h.s.clearInputs, saved, dropped, summary)
	if elog.cleared > 0 || elog.dropped > 0 {
		req.Meta.Set(MetaHeader, elog.header())
	}
	metricCalls.WithLabelValues(route, outcome).Inc()
	if len(cleared) > 0 || len(dropped) > 0 {
		metricCleared.WithLabelValues(route).Add(float64(len(cleared)))
		metricSaved.WithLabelValues(route).Add(float64(max(saved, 0)))
		h.log.Debug().Str("route", route).Int("tokens_before", before).Int("tokens_after", count).
			Int("cleared", len(cleared)).Int("dropped", len(dropped)).Msg("context edited")
	}
	if !t.changed {
		return req, nil
	}
	body, err := t.build(req.Body)
	if err != nil {
		// Only on JSON that gjson parsed but sjson cannot edit; send it as is.
		h.log.Warn().Err(err).Str("route", route).Msg("context edit not applied")
		return req, nil
	}
	out := req.Clone()
	out.Body = body
	if t.moved() {
		out.Messages.Rewrite() // messages dropped or summarised: indices move
	}
	return out, nil
}

// planClears picks the tool results to clear, oldest first: all but the keep
// most recent tool results, skipping excluded tools, results already cleared
// and results no longer than the placeholder. With clear_at_least = 0 it
// takes every candidate (one large edit, then a stable prefix for many
// rounds); otherwise it stops once the count is under the target and at
// least clear_at_least tokens are saved, and clears nothing when that minimum
// cannot be reached and the request still fits the window (breaking the
// cache would not be worth it).
func (h *handler) planClears(t *transcript, count int, b budget) []int {
	var tools []int
	for i := range t.msgs {
		if m := &t.msgs[i]; m.role == "tool" && !m.dropped {
			tools = append(tools, i)
		}
	}
	if len(tools) <= h.s.keep {
		return nil
	}
	var plan []int
	saved := 0
	for _, i := range tools[:len(tools)-h.s.keep] {
		m := &t.msgs[i]
		if m.clear || m.callID == "" || h.s.exclude[m.name] {
			continue
		}
		s := t.clearSaving(i, h.s.placeholder, h.s.clearInputs)
		if s <= 0 {
			continue
		}
		plan = append(plan, i)
		saved += s
		if h.s.clearAtLeast > 0 && count-saved <= b.target && saved >= h.s.clearAtLeast {
			break
		}
	}
	if h.s.clearAtLeast > 0 && saved < h.s.clearAtLeast && (b.limit <= 0 || count <= b.limit) {
		return nil
	}
	return plan
}

// exceeded is the error OpenAI returns for a prompt over the window; edited
// says the count is what context editing left. The caller names the
// client's field (req.Messages: "input" on /v1/responses).
func exceeded(b budget, count int, edited bool) *pipeline.Error {
	msg := "This model's maximum context length is %d tokens. However, your messages resulted in about %d tokens"
	if edited {
		msg += " after context editing"
	}
	args := []any{b.window, count}
	if out := b.window - b.limit; out > 0 {
		msg += " and %d tokens are requested for the completion"
		args = append(args, out)
	}
	e := pipeline.Invalid(http.StatusBadRequest, pipeline.CodeContextLengthExceeded, msg+". Please reduce the length of the messages.", args...)
	e.Param = "messages"
	return e
}

func routeName(req *pipeline.Request) string {
	if req.Route != nil {
		return req.Route.Name
	}
	return req.Model
}
