package proxy

import (
	"bytes"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/anthropic"
	"github.com/llmgw/gateway/jsonedit"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// setMessages makes pc an anthropic provider: chat requests go to the
// Messages API (base_url, with or without its /v1, then /v1/messages),
// authenticated with x-api-key instead of a bearer token.
func (pc *providerClient) setMessages() {
	pc.messages = true
	pc.auth = ""
	pc.chatURI = pc.withQuery(pc.scheme + "://" + pc.host + strings.TrimSuffix(pc.basePath, "/v1") + "/v1/messages")
}

// setMessagesHeaders writes an anthropic provider's key, API version and
// beta features.
func (pc *providerClient) setMessagesHeaders(h *fasthttp.RequestHeader) {
	if pc.cfg.APIKey != "" {
		setOnly(h, "X-Api-Key", pc.cfg.APIKey)
	}
	setOnly(h, "Anthropic-Version", pc.cfg.AnthropicVersion)
	if len(pc.cfg.AnthropicBeta) > 0 {
		setOnly(h, "Anthropic-Beta", strings.Join(pc.cfg.AnthropicBeta, ","))
	}
}

// messagesBody translates a chat request body for target's anthropic
// provider, with the route's max_tokens default.
func (u *Upstream) messagesBody(target *pipeline.Target, body []byte) ([]byte, error) {
	return anthropic.TranslateRequest(body, anthropic.RequestOptions{Model: target.Upstream, MaxTokens: u.maxTokens[target.Model]})
}

// chatHeader is what every chunk or completion translated for req repeats:
// the client's model, and whether the chat body asks for usage.
func chatHeader(req *pipeline.Request) wire.Header {
	return wire.Header{Created: time.Now().Unix(), Model: req.Model,
		IncludeUsage: req.IncludeUsage || gjson.GetBytes(req.Body, "stream_options.include_usage").Bool()}
}

// decodeMessage answers with the chat.completion of a Messages body.
func decodeMessage(provider string, body []byte, req *pipeline.Request) (*pipeline.Response, error) {
	out, err := anthropic.DecodeMessageStopping(provider, body, chatHeader(req), anthropic.LocalStops(req.Body))
	if err != nil {
		return nil, err
	}
	if req.Thinking != nil {
		req.Thinking.Blocks = anthropic.MessageThinking(body)
	}
	return &pipeline.Response{Body: out}, nil
}

// withoutThinking returns body without the gateway's thinking member
// (pipeline.ThinkingMember) on its messages, for a provider other than
// anthropic: the signed blocks are Anthropic's and the member is no part
// of the chat API. body itself when no message has it (the usual case,
// found without parsing), else a new slice.
func withoutThinking(body []byte) []byte {
	if !bytes.Contains(body, []byte(pipeline.ThinkingMember)) {
		return body
	}
	var edits []jsonedit.Edit
	ok := true
	jsonedit.Root(body).Get("messages").ForEach(func(_, m gjson.Result) bool {
		edits, ok = jsonedit.DeleteMembers(edits, body, m, pipeline.ThinkingMember)
		return ok
	})
	if !ok {
		return body
	}
	out, _ := jsonedit.Apply(body, edits)
	return out
}
