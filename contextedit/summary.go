package contextedit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// summaryPrefix opens the message that replaces the summarised turns.
const summaryPrefix = "Summary of the earlier conversation (older messages were replaced by this summary):\n"

// Summary limits: the transcript sent to the summary model, how long a
// summary is kept for later rounds and requests of the same conversation,
// and the room (tokens) a request must have for a summary for the summary
// model to be asked. The call itself has no token cap: a summary cut at one
// would be kept for a day, and a cap the caller's policy refuses (or a
// reasoning model spends on its reasoning) would cost every summary.
const (
	maxSummaryInput  = 256 << 10
	summaryTTL       = 24 * time.Hour
	minSummaryTokens = 16
)

// A summary too long for the request that asked is kept for unfitTTL
// only, marked unfit: a later request it fits takes it, one it does not
// fit goes to summary_fallback without asking the summary model again,
// until the mark expires and the model is asked anew.
const (
	unfitMark = "\x00unfit\x00"
	unfitTTL  = 5 * time.Minute
)

// Store keeps summaries, keyed by the summarised messages, so that every
// round and every later request of a conversation sends the same summary
// (and the provider's cached prefix survives). The response cache's stores
// satisfy it. Implementations are safe for concurrent use.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, bool, error)
	Set(ctx context.Context, key string, val []byte, ttl time.Duration) error
}

// summarizer writes summaries with a model behind the gateway.
type summarizer struct {
	model  string
	prompt string
	lookup func(string) *pipeline.Route
	allows func(*pipeline.Tenant, string) bool
	admit  func(*pipeline.Request) error
	store  Store
}

var (
	errNoSummary  = errors.New("contextedit: no summary")
	errNotAllowed = fmt.Errorf("%w: the caller's policy does not allow the summary model", errNoSummary)
)

// refused is the caller's admission refusing a summary call.
type refused struct{ err error }

func (r *refused) Error() string {
	return "contextedit: the summary call was refused: " + r.err.Error()
}
func (r *refused) Unwrap() error { return r.err }

// limited returns the refusal of a summary call by the caller's admission:
// its rate limits or budgets (429, also when their store is down and
// [middleware.limits] fail is closed), or a 503 of it, which the client
// can act on (wait and retry); nil for any other error.
func limited(err error) error {
	var r *refused
	var pe *pipeline.Error
	if errors.As(err, &r) && errors.As(r.err, &pe) && (pe.Status == http.StatusTooManyRequests || pe.Status == http.StatusServiceUnavailable) {
		return r.err
	}
	return nil
}

// summary returns the summary of the non-system messages of t before cut,
// one that fits says fits (room is the tokens it may take: under
// minSummaryTokens no call is made): from the store when these messages were
// summarised before, else from the summary model (then stored). A summary
// that does not fit is errNoSummary, and is kept only unfitTTL, so that a
// later request of the conversation asks again rather than reading back
// for a day one it cannot use. A tenant whose policy refuses the summary
// model (allows) gets no summary, not even one made before. The summary
// call is made on the caller's behalf: it passes the caller's admission
// (admit: policy, rate limits and budgets, taken only when a call is
// made, not for a stored summary read back) and the summary model's whole
// model-call layer (fallback, limits, metering).
func (s *summarizer) summary(ctx context.Context, req *pipeline.Request, t *transcript, cut, room int, fits func(string) bool) (string, error) {
	route := (*pipeline.Route)(nil)
	if s.lookup != nil {
		route = s.lookup(s.model)
	}
	if route == nil || route.ModelLayer == nil {
		return "", errNoSummary
	}
	if s.allows != nil && !s.allows(req.Tenant, s.model) {
		return "", errNotAllowed
	}
	key := s.key(req, t, cut)
	kept := false // a summary that fits another request (a larger window) is stored: never replaced by an unfit one
	if s.store != nil {
		if v, ok, err := s.store.Get(ctx, key); err == nil && ok && len(v) > 0 {
			text, unfit := strings.CutPrefix(string(v), unfitMark)
			switch {
			case fits(text) && unfit:
				// Too long for the request that asked, not for this one: a
				// summary after all, kept as one.
				_ = s.store.Set(context.WithoutCancel(ctx), key, []byte(text), summaryTTL)
				return text, nil
			case fits(text):
				return text, nil
			case unfit:
				return "", errNoSummary // asked lately: too long then, too long now
			}
			kept = true
		}
	}
	if room < minSummaryTokens {
		return "", errNoSummary // no summary would fit: no call
	}
	// The summary call is its own conversation: r is a new request, so it
	// carries neither the caller's edit log (held by the caller right now)
	// nor its prompt hint; and it is its own model call even under a
	// fallback route's call (fallback.NewCall).
	text := s.transcriptText(t, cut)
	body := make([]byte, 0, len(text)+len(s.prompt)+160)
	body = append(body, `{"model":`...)
	body = jsonstring.Append(body, s.model)
	body = append(body, `,"stream":false,"messages":[{"role":"system","content":`...)
	body = jsonstring.Append(body, s.prompt)
	body = append(body, `},{"role":"user","content":`...)
	body = jsonstring.Append(body, text)
	body = append(body, `}]}`...)
	r := &pipeline.Request{ID: req.ID, Start: req.Start, Body: body, Model: s.model, Route: route,
		Tenant: req.Tenant, Meta: &pipeline.Meta{}} // its own headers: never the client's
	if s.admit != nil {
		if err := s.admit(r); err != nil {
			return "", &refused{err}
		}
	}
	sctx := fallback.NewCall(ctx)
	resp, err := route.ModelLayer.Chat(sctx, r)
	if err != nil {
		return "", err
	}
	if resp.Stream != nil {
		resp.Stream.Close()
		return "", errNoSummary
	}
	out := strings.TrimSpace(gjson.GetBytes(resp.Body, "choices.0.message.content").String())
	if out == "" {
		return "", errNoSummary
	}
	if !fits(out) {
		if s.store != nil && !kept {
			_ = s.store.Set(context.WithoutCancel(ctx), key, []byte(unfitMark+out), unfitTTL)
		}
		return "", errNoSummary
	}
	if s.store != nil {
		_ = s.store.Set(context.WithoutCancel(ctx), key, []byte(out), summaryTTL)
	}
	return out, nil
}

// key names the summary of the messages before cut under this model and
// prompt, for req's tenant: a summary is never another tenant's.
func (s *summarizer) key(req *pipeline.Request, t *transcript, cut int) string {
	h := sha256.New()
	if req.Tenant != nil {
		h.Write([]byte(req.Tenant.Name))
	}
	h.Write([]byte{0})
	h.Write([]byte(s.model))
	h.Write([]byte{0})
	h.Write([]byte(s.prompt))
	for i := 0; i < cut; i++ {
		m := &t.msgs[i]
		if m.dropped || isSystem(m.role) {
			continue
		}
		h.Write([]byte{0})
		h.Write([]byte(m.raw))
	}
	return "summary:" + hex.EncodeToString(h.Sum(nil))
}

// transcriptText renders the messages to summarise as plain text for the
// summary model, bounded by maxSummaryInput (the newest part is kept).
func (s *summarizer) transcriptText(t *transcript, cut int) string {
	var b strings.Builder
	for i := 0; i < cut; i++ {
		m := &t.msgs[i]
		if m.dropped || isSystem(m.role) {
			continue
		}
		b.WriteString(m.role)
		if m.role == "tool" && m.name != "" {
			b.WriteString(" (" + m.name + ")")
		}
		b.WriteString(": ")
		b.WriteString(wire.ContentText(gjson.Parse(m.content)))
		for _, c := range m.calls {
			b.WriteString("\n[called " + c.name + " with " + gjson.Parse(c.input).String() + "]")
		}
		b.WriteString("\n\n")
	}
	out := b.String()
	if len(out) > maxSummaryInput {
		out = out[len(out)-maxSummaryInput:]
	}
	return out
}

// summaryMessage is the JSON of the user message that carries a summary.
func summaryMessage(summary string) string {
	b := append([]byte(`{"role":"user","content":`), jsonstring.Append(nil, summaryPrefix+summary)...)
	return string(append(b, '}'))
}
