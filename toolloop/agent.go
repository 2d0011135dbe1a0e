package toolloop

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/llmgw/gateway/pipeline"
	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
)

const agentParams = `{"type":"object","properties":{"instruction":{"type":"string","description":"What the expert should do, with all the context it needs"}},"required":["instruction"],"additionalProperties":false}`

// agentTool asks another model behind the gateway (its route's model layer,
// non-streaming) with its own system prompt; the result is its final text.
// The call is made on the caller's behalf, so admit (Options.Admit) applies
// the caller's policy to it first.
type agentTool struct {
	name   string
	model  string
	system string
	lookup func(model string) *pipeline.Route
	admit  func(r *pipeline.Request) error
	log    zerolog.Logger
	max    int // bytes of the model's stream kept (Options.RoundMax)
}

func (a *agentTool) run(ctx context.Context, c *pipeline.ToolCall) ([]byte, error) {
	var route *pipeline.Route
	if a.lookup != nil {
		route = a.lookup(a.model)
	}
	if route == nil || route.ModelLayer == nil {
		return nil, &ToolError{Kind: "tool_error", Message: "the expert model is not available"}
	}
	instr := gjson.GetBytes(c.Arguments, "instruction").String()
	body := make([]byte, 0, len(instr)+len(a.system)+128)
	body = append(body, `{"model":`...)
	body = appendJSONString(body, []byte(a.model))
	body = append(body, `,"messages":[`...)
	if a.system != "" {
		body = append(body, `{"role":"system","content":`...)
		body = appendJSONString(body, []byte(a.system))
		body = append(body, "},"...)
	}
	body = append(body, `{"role":"user","content":`...)
	body = appendJSONString(body, []byte(instr))
	body = append(body, `}],"stream":false}`...)

	var r pipeline.Request
	if c.Request != nil {
		r = *c.Request
	}
	r.Body, r.Model, r.Stream, r.IncludeUsage = body, a.model, false, false
	r.Route, r.Target = route, nil
	// Its own headers: the agent's fallback must not name the expert model
	// as the one that answered the client.
	r.Meta = &pipeline.Meta{}
	// Nor its usage: the client's answer counts the loop's rounds only
	// (an agent's call is metered on its own all the same).
	r.Usage = nil
	if a.admit != nil {
		if err := a.admit(&r); err != nil {
			return nil, a.denied(&r, err)
		}
	}
	resp, err := route.ModelLayer.Chat(ctx, &r)
	if errors.Is(err, ErrModelCallLimit) {
		return nil, &ToolError{Kind: "limit_reached", Message: "the expert was not asked: this request reached its limit of model calls (tool_loop.max_model_calls)"}
	}
	if err != nil {
		return nil, &ToolError{Kind: "tool_error", Message: "the expert model failed", Detail: err}
	}
	// The result is always text: quote it so that an answer like "42" stays a
	// string in the envelope.
	var text []byte
	if resp.Stream != nil {
		if text, err = streamText(resp.Stream, cmp.Or(a.max, maxRoundBytes)); err != nil {
			return nil, err
		}
	} else {
		msg := gjson.GetBytes(resp.Body, "choices.0.message")
		if r := msg.Get("refusal").String(); r != "" && strings.TrimSpace(msg.Get("content").String()) == "" {
			return nil, &ToolError{Kind: "refused", Message: "the expert model refused: " + r}
		}
		text = []byte(msg.Get("content").String())
	}
	if len(bytes.TrimSpace(text)) == 0 {
		// Tool calls it was offered none of, or nothing at all: not an
		// answer the calling model should take for one.
		return nil, &ToolError{Kind: "tool_error", Message: "the expert model gave no text answer"}
	}
	return appendJSONString(nil, text), nil
}

// denied logs a policy denial of the agent's model call and returns the
// error result the model sees: the policy's own client-facing message (it
// names the model and the limit, as the client would see it) and never the
// request's failure.
func (a *agentTool) denied(r *pipeline.Request, err error) error {
	msg, code, kind := "the expert model may not be called for this caller", "", "not_allowed"
	var pe *pipeline.Error
	if errors.As(err, &pe) {
		if pe.Message != "" {
			msg = pe.Message
		}
		code = pe.Code
		if pe.Status == http.StatusTooManyRequests {
			kind = "limit_reached" // a rate limit or a spent budget: not a permanent refusal
		}
	}
	ev := a.log.Info().Str("request_id", r.ID).Str("tool", a.name).Str("model", a.model).Str("code", code)
	if r.Tenant != nil {
		ev = ev.Str("tenant", r.Tenant.Name)
	}
	ev.Msg("agent tool: model call denied by the caller's policy")
	return &ToolError{Kind: kind, Message: msg, Detail: err}
}

// streamText drains s and returns the concatenated content deltas. Text
// over limit bytes (maxRoundBytes) fails it like a failed stream, its cause
// the loop's own error for a round over the limit.
func streamText(s pipeline.Stream, limit int) ([]byte, error) {
	defer s.Close()
	var sb strings.Builder
	for {
		ch, err := s.Next()
		if err != nil {
			if isEOF(err) {
				return []byte(sb.String()), nil
			}
			return nil, &ToolError{Kind: "tool_error", Message: "the expert model failed", Detail: err}
		}
		if len(ch) > 0 && ch[0] == ':' {
			continue
		}
		sb.WriteString(gjson.GetBytes(ch, "choices.0.delta.content").String())
		if sb.Len() > limit {
			return nil, &ToolError{Kind: "tool_error", Message: "the expert model failed", Detail: roundTooLarge()}
		}
	}
}
