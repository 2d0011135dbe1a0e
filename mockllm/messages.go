package mockllm

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/jsonvalid"
)

// This file is the mock's Anthropic Messages mode: POST /v1/messages,
// validated as strictly as Anthropic validates it, answered from the same
// responder as chat completions, in Anthropic's event stream or message
// JSON (messages_events.go).

// maxCacheControl is Anthropic's limit of cache_control blocks per request.
const maxCacheControl = 4

// messagesError is a refusal in Anthropic's error envelope.
type messagesError struct {
	status       int
	typ, message string
}

// appendMessagesError appends {"type":"error","error":{"type","message"}}.
func appendMessagesError(dst []byte, typ, message string) []byte {
	dst = append(dst, `{"type":"error","error":{"type":`...)
	dst = appendNullableString(dst, typ)
	dst = append(dst, `,"message":`...)
	dst = appendNullableString(dst, message)
	return append(dst, "}}"...)
}

func writeMessagesError(ctx *fasthttp.RequestCtx, e *messagesError) {
	ctx.SetStatusCode(e.status)
	ctx.SetContentType("application/json")
	ctx.SetBody(appendMessagesError(nil, e.typ, e.message))
}

func badMessages(format string, args ...any) *messagesError {
	return &messagesError{status: 400, typ: "invalid_request_error", message: fmt.Sprintf(format, args...)}
}

// messagesFaultError is the Anthropic error of a status fault: the type
// follows the status (529 overloaded_error, 429 rate_limit_error...).
func messagesFaultError(f *Fault, defaultStatus int) *messagesError {
	e := &messagesError{status: f.Status, typ: f.Type, message: f.Message}
	if e.status == 0 {
		e.status = defaultStatus
	}
	if e.typ == "" {
		e.typ = faultTypes[e.status]
	}
	if e.typ == "" {
		e.typ = "api_error"
	}
	if e.message == "" {
		e.message = "mock fault: " + e.typ
	}
	return e
}

// faultTypes is Anthropic's error type for each status a fault may have.
var faultTypes = map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
	404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 529: "overloaded_error"}

// writeMessagesFault answers with a status fault in Anthropic's form.
func writeMessagesFault(ctx *fasthttp.RequestCtx, f *Fault) {
	faultHeaders(ctx, f)
	writeMessagesError(ctx, messagesFaultError(f, 500))
}

// messages answers POST /v1/messages.
func (s *Server) messages(ctx *fasthttp.RequestCtx, reqID string) {
	p, perr := parseMessages(ctx.PostBody())
	model := ""
	if p != nil {
		model = p.call.Model
	}
	n := s.rec.count(model)
	s.record(ctx, model)
	if perr == nil && ctx.Request.Header.Peek("anthropic-version") == nil {
		perr = badMessages("anthropic-version: header is required")
	}
	if perr != nil {
		s.log.Debug().Str("error", perr.message).Msg("mockllm: refusing messages request")
		s.sleep(s.opts.FirstByteDelay)
		writeMessagesError(ctx, perr)
		return
	}
	call := &p.call
	call.N = n
	if w, ok := s.window[call.Model]; ok && p.promptTokens > w {
		s.sleep(s.opts.FirstByteDelay)
		writeMessagesError(ctx, badMessages("prompt is too long: %d tokens > %d maximum", p.promptTokens, w))
		return
	}
	turn := s.script(ctx, call)
	a := s.resolve(call, p, turn)
	a.id = "msg_mock_" + strings.TrimPrefix(a.id, "chatcmpl-mock-")
	a.messages = true
	if s.answerFault(ctx, turn.Fault, call.Model, writeMessagesFault) {
		return
	}
	if call.Stream {
		s.startStream(ctx, reqID, a, turn.Fault)
		return
	}
	s.sleep(s.opts.FirstByteDelay)
	if f := turn.Fault; f != nil && (f.ErrorEvent || f.Cut || f.Malformed) {
		s.logFault("error", a.model)
		writeMessagesError(ctx, messagesFaultError(&Fault{Status: 529, Message: f.Message}, 529))
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(appendMessage(nil, a))
}

// parseMessages validates a Messages request the way Anthropic does:
// model, a positive max_tokens, roles that alternate starting with user,
// every tool_use answered by a tool_result at the start of the next
// message (and no result without its call), non-empty text blocks, tools
// with a name and an input_schema, at most 4 cache_control blocks, no
// thinking with a tool_choice that forces a call, and with thinking on, a
// last assistant message with tool_use blocks that starts with the thinking
// block the mock signed (signatureMock). body is only read.
func parseMessages(body []byte) (*parsed, *messagesError) {
	if !jsonvalid.Bytes(body) || !gjson.ParseBytes(body).IsObject() {
		return nil, badMessages("the request body is not a JSON object")
	}
	root := gjson.ParseBytes(body)
	p := &parsed{}
	p.call.Model = root.Get("model").Str
	p.call.Body = body
	p.call.Stream = root.Get("stream").Bool()
	p.includeUsage = true
	if p.call.Model == "" {
		return p, badMessages("model: Field required")
	}
	if mt := root.Get("max_tokens"); mt.Type != gjson.Number || mt.Int() < 1 {
		return p, badMessages("max_tokens: Field required")
	}
	if s := root.Get("system"); s.Exists() && s.Type != gjson.String {
		if err := checkBlocks("system", s, "text"); err != nil {
			return p, err
		}
	}
	markers := countCacheControl(root)
	if markers > maxCacheControl {
		return p, badMessages("A maximum of %d blocks with cache_control may be provided. Found %d.", maxCacheControl, markers)
	}
	var err *messagesError
	root.Get("tools").ForEach(func(k, t gjson.Result) bool {
		if t.Get("name").Str == "" || !t.Get("input_schema").IsObject() {
			err = badMessages("tools.%s: a tool needs a name and an input_schema object", k.Raw)
			return false
		}
		p.call.Tools = append(p.call.Tools, t.Get("name").Str)
		return true
	})
	if err != nil {
		return p, err
	}
	if tc := root.Get("tool_choice"); tc.Exists() && !oneOfStr(tc.Get("type").Str, "auto", "any", "tool", "none") {
		return p, badMessages("tool_choice.type: must be auto, any, tool or none")
	}
	if oneOfStr(root.Get("tool_choice.type").Str, "any", "tool") && root.Get("thinking").IsObject() && root.Get("thinking.type").Str != "disabled" {
		return p, badMessages("Thinking may not be enabled when tool_choice forces tool use.")
	}
	if err := checkConversation(root.Get("messages"), &p.call); err != nil {
		return p, err
	}
	if th := root.Get("thinking"); th.IsObject() && th.Get("type").Str != "disabled" {
		if err := checkThinkingTurn(root.Get("messages")); err != nil {
			return p, err
		}
	}
	p.promptTokens = max(1, (len(root.Get("messages").Raw)+len(root.Get("system").Raw)+len(root.Get("tools").Raw))/4)
	return p, nil
}

// checkConversation checks roles and tool pairing and fills the
// message-derived fields of call.
func checkConversation(msgs gjson.Result, call *Call) *messagesError {
	list := msgs.Array()
	if len(list) == 0 {
		return badMessages("messages: at least one message is required")
	}
	var pending []string // tool_use ids of the previous assistant message
	for i, m := range list {
		at := "messages." + strconv.Itoa(i)
		role := m.Get("role").Str
		want := "user"
		if i%2 == 1 {
			want = "assistant"
		}
		if role != want {
			return badMessages("%s: roles must alternate between \"user\" and \"assistant\", starting with \"user\"; got %q", at, role)
		}
		c := m.Get("content")
		if c.Type == gjson.String {
			if len(pending) > 0 {
				return unansweredUse(at, pending)
			}
			call.LastRole, call.LastText, call.ToolResults = role, c.Str, nil
			continue
		}
		allowed := []string{"text", "image", "document", "tool_result"}
		if role == "assistant" {
			allowed = []string{"text", "tool_use", "thinking", "redacted_thinking"}
		}
		if err := checkBlocks(at+".content", c, allowed...); err != nil {
			return err
		}
		var uses, results []string
		var text strings.Builder
		inResults := true
		for j, b := range c.Array() {
			switch b.Get("type").Str {
			case "tool_use":
				uses = append(uses, b.Get("id").Str)
			case "tool_result":
				if !inResults {
					return badMessages("%s.content.%d: tool_result blocks must come first in a user message", at, j)
				}
				id := b.Get("tool_use_id").Str
				k := indexOf(pending, id)
				if k < 0 {
					return badMessages("%s.content.%d: unexpected tool_use_id %q: no tool_use block with this id in the previous message", at, j, id)
				}
				pending = append(pending[:k], pending[k+1:]...)
				results = append(results, contentText(b.Get("content")))
				continue
			case "text":
				text.WriteString(b.Get("text").Str)
			}
			inResults = false
		}
		if len(pending) > 0 {
			return unansweredUse(at, pending)
		}
		pending = uses
		if role == "user" && len(results) > 0 && text.Len() == 0 {
			// Tool results alone: the chat form's tool messages, which the
			// responders answer as such.
			role = "tool"
		}
		call.LastRole, call.LastText, call.ToolResults = role, text.String(), results
	}
	if len(pending) > 0 {
		return unansweredUse("messages."+strconv.Itoa(len(list)), pending)
	}
	return nil
}

func unansweredUse(at string, ids []string) *messagesError {
	return badMessages("%s: tool_use ids were found without tool_result blocks immediately after: %s", at, strings.Join(ids, ", "))
}

// checkBlocks checks a content block list: objects of an allowed type, a
// text block with non-empty text, a tool_use with an id, a name and an
// object input, a tool_result with a tool_use_id.
func checkBlocks(at string, blocks gjson.Result, allowed ...string) *messagesError {
	if !blocks.IsArray() || len(blocks.Array()) == 0 {
		return badMessages("%s: must be a non-empty list of content blocks", at)
	}
	for j, b := range blocks.Array() {
		bat := at + "." + strconv.Itoa(j)
		typ := b.Get("type").Str
		if !oneOfStr(typ, allowed...) {
			return badMessages("%s.type: %q is not allowed here", bat, typ)
		}
		switch typ {
		case "text":
			if b.Get("text").Str == "" {
				return badMessages("%s: text content blocks must be non-empty", bat)
			}
		case "tool_use":
			if b.Get("id").Str == "" || b.Get("name").Str == "" || !b.Get("input").IsObject() {
				return badMessages("%s: tool_use needs id, name and an input object", bat)
			}
		case "tool_result":
			if b.Get("tool_use_id").Str == "" {
				return badMessages("%s.tool_use_id: Field required", bat)
			}
		case "image":
			if st := b.Get("source.type").Str; st != "base64" && st != "url" {
				return badMessages("%s.source: must be base64 or url", bat)
			}
		}
	}
	return nil
}

// countCacheControl counts the blocks with cache_control: tools, system
// blocks, message blocks and the blocks inside tool results.
func countCacheControl(root gjson.Result) int {
	n := 0
	var count func(_, b gjson.Result) bool
	count = func(_, b gjson.Result) bool {
		if b.IsObject() && b.Get("cache_control").Exists() {
			n++
		}
		if c := b.Get("content"); c.IsArray() {
			c.ForEach(count)
		}
		return true
	}
	root.Get("tools").ForEach(count)
	root.Get("system").ForEach(count)
	root.Get("messages").ForEach(func(_, m gjson.Result) bool {
		m.Get("content").ForEach(count)
		return true
	})
	return n
}

func oneOfStr(s string, list ...string) bool {
	return indexOf(list, s) >= 0
}

// signatureMock is the signature of every thinking block the mock sends.
const signatureMock = "c2lnbmF0dXJl"

// checkThinkingTurn applies Anthropic's rule for thinking with tools: the
// last assistant message, when it has tool_use blocks, must start with a
// thinking or redacted_thinking block, and a thinking block must carry the
// signature it was sent with.
func checkThinkingTurn(msgs gjson.Result) *messagesError {
	list := msgs.Array()
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].Get("role").Str != "assistant" {
			continue
		}
		blocks := list[i].Get("content").Array()
		if len(blocks) == 0 {
			return nil
		}
		uses := false
		for j, b := range blocks {
			switch b.Get("type").Str {
			case "tool_use":
				uses = true
			case "thinking":
				if b.Get("signature").Str != signatureMock {
					return badMessages("messages.%d.content.%d: Invalid `signature` in `thinking` block", i, j)
				}
			}
		}
		if first := blocks[0].Get("type").Str; uses && first != "thinking" && first != "redacted_thinking" {
			return badMessages("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block.", i, first)
		}
		return nil
	}
	return nil
}
