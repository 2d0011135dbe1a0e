package guardrails

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// Engine holds the compiled guardrails and which of them each tenant's
// requests pass. Read-only after New; safe for concurrent use.
type Engine struct {
	def     stages            // tenants without an entry of their own
	tenants map[string]stages // tenants whose [[policies]] entry sets guardrails
}

// stages are one tenant's guards by stage.
type stages map[string][]*guard

// New compiles cfg's guardrails; nil when there are none. A tenant gets
// every guardrail unless the "*" policy entry lists some, and its own
// entry's list (even []) replaces that.
func New(cfg *config.Config) (*Engine, error) {
	if len(cfg.Guardrails) == 0 {
		return nil, nil
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	byName := map[string]*guard{}
	var all []string
	for i, c := range cfg.Guardrails {
		g, err := compile(c, client)
		if err != nil {
			return nil, fmt.Errorf("guardrails[%d]: %w", i, err)
		}
		byName[c.Name] = g
		all = append(all, c.Name)
	}
	pick := func(names []string) stages {
		s := stages{}
		for _, n := range names {
			if g := byName[n]; g != nil {
				s[g.stage] = append(s[g.stage], g)
			}
		}
		return s
	}
	e := &Engine{tenants: map[string]stages{}}
	defNames := all
	for _, p := range cfg.Policies {
		if p.Tenant == "*" && p.Guardrails != nil {
			defNames = p.Guardrails
		}
	}
	e.def = pick(defNames)
	for _, p := range cfg.Policies {
		if p.Tenant != "*" && p.Guardrails != nil {
			e.tenants[p.Tenant] = pick(p.Guardrails)
		}
	}
	return e, nil
}

// guards returns the guards of stage for t (nil t: the open gateway).
func (e *Engine) guards(t *pipeline.Tenant, stage string) []*guard {
	if t != nil {
		if s, ok := e.tenants[t.Name]; ok {
			return s[stage]
		}
	}
	return e.def[stage]
}

// asksForAudio reports whether a chat body asks for an audio answer
// (modalities with "audio", or audio settings). Member names and the
// modality are read in any case, as an upstream decoding with Go's
// encoding/json reads them.
func asksForAudio(body []byte) bool {
	audio := false
	gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
		switch {
		case strings.EqualFold(k.Str, "audio"):
			audio = v.Exists() && v.Type != gjson.Null
		case strings.EqualFold(k.Str, "modalities") && v.IsArray():
			v.ForEach(func(_, m gjson.Result) bool {
				audio = strings.EqualFold(m.Str, "audio")
				return !audio
			})
		}
		return !audio
	})
	return audio
}

// errAudioUnchecked refuses an audio answer where response guardrails
// apply: they judge text, and the audio would say what they redact or
// block in its transcript.
func errAudioUnchecked() error {
	e := pipeline.BadRequest("modalities", "audio answers are not available under this key's response guardrails, which check text: ask for text only")
	e.Code = pipeline.CodeUnsupportedParameter
	return e
}

// Middleware is the request-layer middleware of the request and response
// stages; nil for a nil Engine.
func (e *Engine) Middleware() pipeline.Middleware {
	if e == nil {
		return nil
	}
	return func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
			in, out := e.guards(req.Tenant, StageRequest), e.guards(req.Tenant, StageResponse)
			if len(out) > 0 && asksForAudio(req.Body) {
				return nil, errAudioUnchecked()
			}
			local, remote := splitRemote(in)
			if len(remote) > 0 {
				// One question about every message's text, however many
				// messages: not one classifier call per message.
				texts, err := messageTexts(req.Body)
				if err != nil {
					return nil, err
				}
				if err := askOnce(ctx, remote, req.Meta, texts); err != nil {
					return nil, err
				}
			}
			if len(local) > 0 {
				body, err := checkRequest(ctx, newChecker(ctx, local, req.Meta), req.Body)
				if err != nil {
					return nil, err
				}
				if body != nil {
					req = req.Clone()
					req.Body = body
				}
			}
			if len(out) > 0 && req.Lookahead != nil {
				// Response checks hold text back in windows: the client's
				// writer must not wait on upstream events that may come to
				// nothing (pipeline.Lookahead).
				req = req.Clone()
				req.Lookahead = nil
			}
			var held *heldCalls
			report := req.OnServerCall
			if len(out) > 0 && report != nil {
				// The answer's texts change here: the calls go on where
				// the rewritten texts put them (servercalls.go).
				held = &heldCalls{ck: newChecker(ctx, sideGuards(out), req.Meta)}
				req = req.Clone()
				req.OnServerCall = held.note
			}
			resp, err := next.Chat(ctx, req)
			if err != nil || len(out) == 0 {
				if held != nil {
					for _, c := range held.take() {
						report(&c)
					}
				}
				return resp, err
			}
			if resp.Stream != nil {
				s := newStream(ctx, resp.Stream, out, req.Meta)
				s.held, s.report = held, report
				return &pipeline.Response{Stream: s}, nil
			}
			calls := held.take()
			body, err := checkAnswer(newChecker(ctx, out, req.Meta), resp.Body, calls)
			for i := range calls {
				report(&calls[i])
			}
			if err != nil {
				return nil, err
			}
			if body != nil {
				resp = &pipeline.Response{Body: body}
			}
			return resp, nil
		})
	}
}
