package proxy

import (
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/pipeline"
)

// The collections of the Responses API that name no response: POST
// /v1/responses/input_tokens counts a request's input, POST
// /v1/responses/compact compacts a conversation. For a model the pipeline
// serves (Runtime.servesResponses) the gateway answers them itself; for
// any other they pass through like a create (passowner.go checks them).
const (
	inputTokensRoute = pipeline.InputTokensEndpoint
	compactRoute     = responsesRoute + "/compact"
)

// responsesCollection reports whether path is one of the collections the
// gateway answers for the models it serves.
func responsesCollection(path string) bool {
	return path == inputTokensRoute || path == compactRoute
}

// handleInputTokens is POST /v1/responses/input_tokens for a model the
// pipeline serves: body has passed the tenant policy as a create would
// (passTarget). It translates the request as a create does, previous
// response included, and counts the chat request's input tokens with the
// tokenizer of the limits and of context editing; no model is called.
func (s *Server) handleInputTokens(ctx *fasthttp.RequestCtx, x *exchange, t *pipeline.Tenant, body []byte) {
	rq, err := s.translateResponses(x.rt.Responses, tenantName(t), body)
	if err != nil {
		s.writeError(ctx, x, err)
		return
	}
	enc := ""
	if route := x.rt.Routes[rq.Model]; route != nil {
		enc = route.Encoding
	}
	c, err := contextedit.CounterFor(enc)
	if err != nil {
		s.writeError(ctx, x, pipeline.Errorf(fasthttp.StatusInternalServerError, pipeline.TypeServer, pipeline.CodeInternal,
			"the gateway could not count the request's tokens"))
		return
	}
	n, err := inputTokens(c, rq.Chat)
	if err != nil {
		s.writeError(ctx, x, err)
		return
	}
	ctx.SetContentType("application/json")
	b := append([]byte(`{"object":"response.input_tokens","input_tokens":`), strconv.Itoa(n)...)
	ctx.SetBody(append(b, '}'))
}

// inputTokens counts the input tokens of a translated chat request: its
// messages and tools as the limits count them (contextedit.Counter.Count),
// and the JSON schema of a structured output format, which reaches the
// model's prompt as the tools' definitions do.
func inputTokens(c *contextedit.Counter, chat []byte) (int, error) {
	n, err := c.Count(chat)
	if err != nil {
		return 0, pipeline.BadRequest("", "the request could not be counted")
	}
	if schema := gjson.GetBytes(chat, "response_format.json_schema.schema"); schema.IsObject() {
		n += c.CountText(schema.Raw)
	}
	return n, nil
}

// compactUnsupported is the answer of POST /v1/responses/compact for a
// model the pipeline serves: the gateway keeps conversations as chat
// messages and has no compacted form to give.
func compactUnsupported(model string) error {
	return pipeline.BadRequest("model", "Compacting a conversation (%s) is not supported for model '%s' through this gateway; "+
		"continue it with previous_response_id instead.", compactRoute, truncate(model, 128))
}
