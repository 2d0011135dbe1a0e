package responses

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// Request is a Responses API request translated into a chat request.
type Request struct {
	Model    string
	Stream   bool
	Store    bool   // store the response for GET and previous_response_id (default true)
	Previous string // previous_response_id
	// Chat is the chat.completion request the pipeline runs.
	Chat []byte
	// History is the conversation as chat messages (a JSON array) without
	// the instructions: the previous response's history, then this input.
	// A follow-up continues from it plus this response's answer.
	History []byte
	// Input is the request's input as a JSON array of items, for
	// GET /v1/responses/{id}/input_items.
	Input []byte
	// Echo is the request's settings as the response object reports them
	// (wire.ResponsesHeader.Echo).
	Echo []byte
	// Summary: reasoning.summary asked for a reasoning summary
	// (wire.ResponsesHeader.Summary).
	Summary bool
	// MaxToolCalls, with LimitToolCalls: max_tool_calls, the client's cap
	// on the server tools the gateway runs for the response (they show as
	// mcp_call items); the tool loop takes the lower of it and its own.
	MaxToolCalls   int
	LimitToolCalls bool
	// Logprobs: include names "message.output_text.logprobs", so the
	// output text carries its tokens' logprobs (wire.ResponsesHeader.Logprobs)
	// and the chat request asks for them.
	Logprobs bool
}

// Head reads what must be known before a request is translated: the model
// and the previous response it continues, if any.
func Head(body []byte) (model, previous string, err error) {
	root, err := pipeline.RequestObject(body)
	if err != nil {
		return "", "", err
	}
	m := root.Get("model")
	if m.Type != gjson.String || m.Str == "" {
		return "", "", pipeline.BadRequest("model", "model must be a non-empty string")
	}
	p := root.Get("previous_response_id")
	switch {
	case p.Type == gjson.String && p.Str == "":
		// Read as none, the request would answer without the history the
		// client meant to continue.
		return "", "", pipeline.BadRequest("previous_response_id", "previous_response_id must not be empty: leave it out, or send null, to start a conversation")
	case p.Type == gjson.Null, p.Type == gjson.String:
	default:
		return "", "", pipeline.BadRequest("previous_response_id", "previous_response_id must be a string")
	}
	return m.Str, p.Str, nil
}

// Resolver finds an output item of a stored response by the item's id, for
// item_reference inputs: a Result that does not exist when there is none
// the caller may see, or an error when it could not look (the store
// failed, or ErrTooManyReferenced).
type Resolver func(itemID string) (gjson.Result, error)

// ErrTooManyReferenced: a request's references name items of more stored
// responses than one request may read.
var ErrTooManyReferenced = errors.New("responses: references to more stored responses than one request may read")

// Translate turns a Responses API request body into a chat request. prior
// is the history of the previous response (a JSON array of chat messages)
// when the request continues one; resolve finds referenced items (may be
// nil).
func Translate(body, prior []byte, resolve Resolver) (*Request, error) {
	model, previous, err := Head(body)
	if err != nil {
		return nil, err
	}
	root := gjson.ParseBytes(body)
	if err := checkInclude(root.Get("include")); err != nil {
		return nil, err
	}
	r := &Request{Model: model, Previous: previous, Store: true, Logprobs: includesLogprobs(root.Get("include"))}
	if err := r.options(root); err != nil {
		return nil, err
	}
	if err := r.conversation(root.Get("input"), prior, resolve); err != nil {
		return nil, err
	}
	c := make([]byte, 0, len(body)+len(r.History)+64)
	c = append(c, `{"model":`...)
	c = jsonstring.Append(c, model)
	c = append(c, `,"messages":[`...)
	switch instr := root.Get("instructions"); {
	case instr.Type == gjson.String:
		c = append(c, `{"role":"system","content":`...)
		c = append(c, instr.Raw...)
		c = append(c, '}')
		if len(r.History) > 2 {
			c = append(c, ',')
		}
	case instr.Exists() && instr.Type != gjson.Null:
		return nil, pipeline.BadRequest("instructions", "instructions must be a string")
	}
	c = append(c, r.History[1:]...) // the array's members and its ']'
	if r.Stream {
		c = append(c, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	if c, err = appendSettings(c, root, r.Logprobs); err != nil {
		return nil, err
	}
	r.Chat = append(c, '}')
	r.Echo = echo(root)
	if root.Get("reasoning.summary").Type == gjson.String { // auto, concise or detailed (checkSettings)
		r.Summary = true
	}
	return r, nil
}

// options reads what the gateway itself acts on: store and stream, and the
// features it refuses.
func (r *Request) options(root gjson.Result) error {
	for _, k := range [...]string{"background", "conversation", "prompt"} {
		if v := root.Get(k); v.Exists() && v.Type != gjson.Null && v.Type != gjson.False {
			return pipeline.BadRequest(k, "%s is not supported by this gateway", k)
		}
	}
	if v := root.Get("store"); v.Exists() {
		if v.Type != gjson.True && v.Type != gjson.False && v.Type != gjson.Null {
			return pipeline.BadRequest("store", "store must be a boolean")
		}
		r.Store = v.Type != gjson.False
	}
	switch v := root.Get("stream"); v.Type {
	case gjson.True:
		r.Stream = true
	case gjson.False, gjson.Null:
	default:
		if v.Exists() {
			return pipeline.BadRequest("stream", "stream must be a boolean")
		}
	}
	if v := root.Get("max_tool_calls"); v.Exists() && v.Type != gjson.Null {
		if !wire.Integer(v) || v.Num < 0 || v.Num > 1<<20 {
			return pipeline.BadRequest("max_tool_calls", "max_tool_calls must be a non-negative integer")
		}
		r.MaxToolCalls, r.LimitToolCalls = int(v.Num), true
	}
	if v := root.Get("truncation"); v.Exists() && v.Type != gjson.Null && v.Str != "auto" && v.Str != "disabled" {
		return pipeline.BadRequest("truncation", "truncation must be auto or disabled")
	}
	return checkSettings(root)
}

// numberSettings are the numeric settings and their ranges.
var numberSettings = [...]struct {
	key      string
	min, max float64
	integer  bool
}{
	{"temperature", 0, 2, false}, {"top_p", 0, 1, false},
	{"max_output_tokens", 1, math.MaxInt32, true}, {"top_logprobs", 0, 20, true},
}

// checkSettings refuses a setting of the wrong type or out of its range,
// as OpenAI does (null is the default of each). Passed on, an upstream
// may read it otherwise or refuse it in its own words, and the response
// object repeats it where the clients' types expect a number, a string
// or a map of strings.
func checkSettings(root gjson.Result) error {
	for _, n := range numberSettings {
		if err := pipeline.CheckNumber(root.Get(n.key), n.key, n.min, n.max, n.integer); err != nil {
			return err
		}
	}
	for _, key := range [...]string{"user", "safety_identifier", "prompt_cache_key", "service_tier", "reasoning.summary"} {
		if v := root.Get(key); v.Exists() && v.Type != gjson.Null && v.Type != gjson.String {
			return pipeline.BadRequest(key, "Invalid '%s': expected a string.", key)
		}
	}
	if err := pipeline.CheckBool(root.Get("parallel_tool_calls"), "parallel_tool_calls"); err != nil {
		return err
	}
	for _, o := range [...]string{"reasoning", "text", "text.format", "stream_options"} {
		if v := root.Get(o); v.Exists() && v.Type != gjson.Null && !v.IsObject() {
			return pipeline.BadRequest(o, "Invalid '%s': expected an object.", o)
		}
	}
	if err := oneOf(root.Get("reasoning.effort"), "reasoning.effort", "none", "minimal", "low", "medium", "high", "xhigh", "max"); err != nil {
		return err
	}
	if err := oneOf(root.Get("text.verbosity"), "text.verbosity", "low", "medium", "high"); err != nil {
		return err
	}
	if err := oneOf(root.Get("reasoning.summary"), "reasoning.summary", "auto", "concise", "detailed"); err != nil {
		return err
	}
	if err := oneOf(root.Get("service_tier"), "service_tier", "auto", "default", "flex", "scale", "priority", "fast", "ultrafast"); err != nil {
		return err
	}
	return checkMetadata(root.Get("metadata"))
}

// oneOf refuses v unless it is absent, null or one of the strings values.
func oneOf(v gjson.Result, param string, values ...string) error {
	if !v.Exists() || v.Type == gjson.Null || (v.Type == gjson.String && slices.Contains(values, v.Str)) {
		return nil
	}
	return pipeline.BadRequest(param, "Invalid '%s': expected one of %s.", param, strings.Join(values, ", "))
}

// checkMetadata refuses metadata that is not what OpenAI keeps: at most
// 16 pairs, keys of at most 64 characters, string values of at most 512.
func checkMetadata(v gjson.Result) error {
	if !v.Exists() || v.Type == gjson.Null {
		return nil
	}
	if !v.IsObject() {
		return pipeline.BadRequest("metadata", "Invalid 'metadata': expected an object of strings.")
	}
	n := 0
	var err error
	v.ForEach(func(k, val gjson.Result) bool {
		n++
		switch {
		case n > 16:
			err = pipeline.BadRequest("metadata", "Invalid 'metadata': expected at most 16 pairs.")
		case utf8.RuneCountInString(k.Str) > 64:
			err = pipeline.BadRequest("metadata", "Invalid 'metadata': a key is longer than 64 characters.")
		case val.Type != gjson.String:
			err = pipeline.BadRequest("metadata", "Invalid 'metadata': expected an object of strings.")
		case utf8.RuneCountInString(val.Str) > 512:
			err = pipeline.BadRequest("metadata", "Invalid 'metadata': a value is longer than 512 characters.")
		}
		return err == nil
	})
	return err
}

// conversation builds History (prior, then input) and Input.
func (r *Request) conversation(input gjson.Result, prior []byte, resolve Resolver) error {
	h := history{open: -1, lookup: resolve, previous: r.Previous}
	if len(prior) > 0 {
		gjson.ParseBytes(prior).ForEach(func(_, m gjson.Result) bool {
			h.add(m.Raw, m.Get("role").Str)
			m.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
				id := c.Get("id").Str
				if strings.HasPrefix(id, pipeline.ApprovalIDPrefix) {
					h.ask(id)
				}
				if h.priorCalls == nil {
					h.priorCalls = map[string]bool{}
				}
				h.priorCalls[id] = true
				return true
			})
			return true
		})
	}
	switch {
	case input.Type == gjson.String:
		r.Input = append(r.Input, `[{"type":"message","role":"user","content":[{"type":"input_text","text":`...)
		r.Input = jsonstring.Append(r.Input, input.Str)
		r.Input = append(r.Input, "}]}]"...)
		h.add(`{"role":"user","content":`+input.Raw+`}`, "user")
	case input.IsArray():
		// Input keeps a referenced item itself: input_items lists what the
		// model was given, never a reference to it.
		r.Input = append(r.Input, '[')
		i := 0
		var err error
		input.ForEach(func(_, it gjson.Result) bool {
			param := "input[" + strconv.Itoa(i) + "]"
			if it, err = h.resolve(it, param, resolve); err == nil {
				err = h.item(it, param)
			}
			if i > 0 {
				r.Input = append(r.Input, ',')
			}
			r.Input = append(r.Input, it.Raw...)
			i++
			return err == nil
		})
		if err != nil {
			return err
		}
		r.Input = append(r.Input, ']')
	case !input.Exists() || input.Type == gjson.Null:
		if len(prior) == 0 {
			return pipeline.BadRequest("input", "input is required")
		}
		r.Input = append(r.Input, "[]"...)
	default:
		return pipeline.BadRequest("input", "input must be a string or an array of items")
	}
	r.History = h.array()
	return nil
}

// passedSettings are the request members the chat request carries under
// its own name (to).
var passedSettings = [...]struct{ from, to string }{
	{"temperature", "temperature"}, {"top_p", "top_p"}, {"user", "user"},
	{"safety_identifier", "safety_identifier"}, {"prompt_cache_key", "prompt_cache_key"},
	{"service_tier", "service_tier"}, {"max_output_tokens", "max_completion_tokens"},
	{"reasoning.effort", "reasoning_effort"}, {"text.verbosity", "verbosity"},
	{"top_logprobs", "top_logprobs"}, {"prompt_cache_retention", "prompt_cache_retention"},
}

// includable are the values OpenAI's include takes. Those for tools the
// gateway does not run, and encrypted reasoning, add nothing to its answers;
// any other value is a 400, as OpenAI refuses it.
var includable = []string{"file_search_call.results", "web_search_call.results", "web_search_call.action.sources",
	"message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs",
	"reasoning.encrypted_content", "message.output_text.logprobs"}

// checkInclude refuses an include that is not a list of includable values.
func checkInclude(include gjson.Result) error {
	if !include.Exists() || include.Type == gjson.Null {
		return nil
	}
	if !include.IsArray() {
		return pipeline.BadRequest("include", "include must be an array of strings")
	}
	var err error
	i := 0
	include.ForEach(func(_, v gjson.Result) bool {
		if v.Type != gjson.String || !slices.Contains(includable, v.Str) {
			err = pipeline.BadRequest("include["+strconv.Itoa(i)+"]", "include values must be one of: %s", strings.Join(includable, ", "))
			return false
		}
		i++
		return true
	})
	return err
}

// includesLogprobs reports whether include (the request's list of extra
// output, checked by checkInclude) asks for the output text's logprobs.
func includesLogprobs(include gjson.Result) bool {
	found := false
	include.ForEach(func(_, v gjson.Result) bool {
		found = v.Type == gjson.String && v.Str == "message.output_text.logprobs"
		return !found
	})
	return found && include.IsArray()
}

// appendSettings appends the chat request's tools, tool choice, format and
// sampling settings. logprobs: the client asked for the output's logprobs,
// which chat gives only with logprobs:true (top_logprobs alone is refused).
func appendSettings(c []byte, root gjson.Result, logprobs bool) ([]byte, error) {
	var err error
	tools := root.Get("tools")
	if tools.Exists() && tools.Type != gjson.Null {
		if c, err = appendTools(c, tools); err != nil {
			return c, err
		}
	}
	if c, err = appendToolChoice(c, root.Get("tool_choice")); err != nil {
		return c, err
	}
	if c, err = appendFormat(c, root.Get("text")); err != nil {
		return c, err
	}
	for _, m := range passedSettings {
		v := root.Get(m.from)
		if !v.Exists() || v.Type == gjson.Null {
			continue
		}
		if m.from == "service_tier" && v.Str == "ultrafast" {
			continue // a Responses API tier chat has not: an upstream would refuse it as a chat request's
		}
		if m.from == "top_logprobs" && !logprobs {
			// Without include's logprobs the answer shows none: asking the
			// upstream for them (chat needs logprobs:true beside
			// top_logprobs) would cost it work for nothing, and is refused
			// by an upstream that has none (Anthropic).
			continue
		}
		c = append(c, `,"`...)
		c = append(c, m.to...)
		c = append(c, `":`...)
		c = append(c, v.Raw...)
	}
	if logprobs {
		// Asked for by include whether or not top_logprobs is given.
		c = append(c, `,"logprobs":true`...)
	}
	if v := root.Get("parallel_tool_calls"); v.Exists() && v.Type != gjson.Null && tools.IsArray() && len(tools.Array()) > 0 {
		c = append(c, `,"parallel_tool_calls":`...)
		c = append(c, v.Raw...)
	}
	return c, nil
}

// echo builds the request settings the response object repeats.
func echo(root gjson.Result) []byte {
	var b []byte
	member := func(key, def string) {
		if len(b) > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, key...)
		b = append(b, `":`...)
		if v := root.Get(key); v.Exists() && v.Type != gjson.Null {
			b = append(b, v.Raw...)
		} else {
			b = append(b, def...)
		}
	}
	member("instructions", "null")
	if len(b) > 0 {
		b = append(b, ',')
	}
	b = append(b, `"tools":`...)
	b = echoTools(b, root.Get("tools"))
	member("tool_choice", `"auto"`)
	member("parallel_tool_calls", "true")
	member("metadata", "{}")
	member("temperature", "null")
	member("top_p", "null")
	member("max_output_tokens", "null")
	member("max_tool_calls", "null")
	member("previous_response_id", "null")
	member("text", `{"format":{"type":"text"}}`)
	member("reasoning", `{"effort":null,"summary":null}`)
	member("store", "true")
	member("truncation", `"disabled"`)
	// Repeated when the request gave them, as OpenAI's object does.
	for _, o := range [...]struct {
		key  string
		kind gjson.Type
	}{{"top_logprobs", gjson.Number}, {"service_tier", gjson.String}, {"user", gjson.String}, {"safety_identifier", gjson.String},
		{"prompt_cache_key", gjson.String}, {"prompt_cache_retention", gjson.String}, {"background", gjson.False}} {
		if v := root.Get(o.key); v.Type == o.kind {
			b = append(b, `,"`...)
			b = append(b, o.key...)
			b = append(b, `":`...)
			b = append(b, v.Raw...)
		}
	}
	return b
}

// echoTools appends the function tools as the response object lists them:
// every FunctionTool member present, null where the request left it out.
func echoTools(b []byte, tools gjson.Result) []byte {
	b = append(b, '[')
	n := 0
	tools.ForEach(func(_, t gjson.Result) bool {
		if n > 0 {
			b = append(b, ',')
		}
		n++
		if gatewayMCP(t) {
			b = append(b, t.Raw...) // as the client declared it
			return true
		}
		b = append(b, `{"type":"function","name":`...)
		b = jsonstring.Append(b, t.Get("name").String())
		for _, k := range [...]string{"description", "parameters", "strict"} {
			b = append(b, `,"`...)
			b = append(b, k...)
			b = append(b, `":`...)
			if v := t.Get(k); v.Exists() {
				b = append(b, v.Raw...)
			} else {
				b = append(b, "null"...)
			}
		}
		b = append(b, '}')
		return true
	})
	return append(b, ']')
}

// history builds the chat messages array of a conversation.
type history struct {
	msgs []string
	// open is the index of the assistant message that later tool calls
	// join, -1 when the next call starts a new one.
	open  int
	calls []string // the open assistant message's tool calls
	// results are the tool messages of the open message's calls the
	// gateway ran itself: they follow it once its calls are written.
	results []string
	// refs are the item ids referenced so far: an item is given once, so
	// what references expand to is bounded by the stored responses they
	// load (at most maxReferenced).
	refs map[string]bool
	// previous is the id of the response the request continues, and
	// priorCalls the ids of the tool calls its history holds: a reference
	// to an item already there would give the model that turn twice.
	previous   string
	priorCalls map[string]bool
	// lookup finds a stored output item by its id (nil: none), for an
	// mcp_call replayed without its output.
	lookup Resolver
	// asked are the ids of the calls awaiting approval so far (an
	// mcp_approval_request item, or a stored history's call of that id):
	// an mcp_approval_response answers one of them.
	asked map[string]bool
	// settled is set for a response's own output (AnswerMessages), which
	// joins a history where the loop put each approved run's result in
	// its decision's place: an mcp_call run on an approval adds nothing.
	settled bool
	// joinNext: an mcp_call left out (no output known) sat after the open
	// assistant text; the next assistant text joins it, as one chat
	// message holds the text of every round of a turn. joined holds the
	// texts joined so far, written into the open message once (settle):
	// rewriting it per join cost the square of the body.
	joinNext bool
	joined   []string
}

// ask records id as a call awaiting approval.
func (h *history) ask(id string) {
	if h.asked == nil {
		h.asked = map[string]bool{}
	}
	h.asked[id] = true
}

func (h *history) add(msg, role string) {
	join := h.joinNext
	h.joinNext = false
	if join && role == "assistant" && h.open >= 0 && len(h.calls) == 0 && h.join(msg) {
		return
	}
	h.flush() // the joined texts too
	h.msgs = append(h.msgs, msg)
	h.open = -1
	if role == "assistant" && !gjson.Get(msg, "tool_calls").Exists() {
		h.open = len(h.msgs) - 1
	}
}

// join notes the text of msg, an assistant message without calls, for
// the open one, when both hold plain text: the rounds of one turn whose
// server call between them was left out, as a chat client sends them (the
// tool loop's resume then puts the kept rounds in their place). It
// reports whether it did. Each message is parsed once, whatever the
// number of joins.
func (h *history) join(msg string) bool {
	next := gjson.Get(msg, "content")
	if next.Type != gjson.String || gjson.Get(msg, "tool_calls").Exists() || gjson.Get(msg, "refusal").Exists() {
		return false
	}
	if h.joined == nil {
		open := h.msgs[h.open]
		if gjson.Get(open, "content").Type != gjson.String || gjson.Get(open, "refusal").Exists() {
			return false
		}
		h.joined = []string{}
	}
	h.joined = append(h.joined, next.Str)
	return true
}

// settleJoined writes the joined texts into the open message's content.
func (h *history) settleJoined() {
	if h.joined == nil {
		return
	}
	texts := h.joined
	h.joined = nil
	open := h.msgs[h.open]
	content := gjson.Get(open, "content").Str + strings.Join(texts, "")
	if joined, err := sjson.Set(open, "content", content); err == nil {
		h.msgs[h.open] = joined
	}
}

// call adds a tool call to the assistant message it belongs to.
func (h *history) call(call string) {
	if h.open < 0 {
		h.msgs = append(h.msgs, `{"role":"assistant","content":null}`)
		h.open = len(h.msgs) - 1
	}
	h.calls = append(h.calls, call)
}

// flush writes the open assistant message's tool calls into it.
func (h *history) flush() {
	h.settleJoined()
	if len(h.calls) == 0 {
		return
	}
	m := h.msgs[h.open]
	h.msgs[h.open] = m[:len(m)-1] + `,"tool_calls":[` + strings.Join(h.calls, ",") + "]}"
	h.calls = h.calls[:0]
	h.msgs = append(h.msgs, h.results...)
	h.results = h.results[:0]
}

func (h *history) array() []byte {
	h.flush()
	b := []byte{'['}
	for i, m := range h.msgs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m...)
	}
	return append(b, ']')
}

// resolve returns input item it, or the stored item it references.
func (h *history) resolve(it gjson.Result, param string, resolve Resolver) (gjson.Result, error) {
	if !it.IsObject() {
		return it, pipeline.BadRequest(param, "each input item must be an object")
	}
	typ := it.Get("type").String()
	if typ != "item_reference" && (typ != "" || it.Get("role").Exists() || !it.Get("id").Exists()) {
		return it, nil // the type of a reference may be left out
	}
	switch v := it.Get("id"); {
	case !v.Exists():
		return it, pipeline.BadRequest(param+".id", "Missing required parameter: '%s.id'.", param)
	case v.Type != gjson.String:
		return it, pipeline.BadRequest(param+".id", "Invalid '%s.id': expected a string.", param)
	}
	id := it.Get("id").Str
	if h.refs[id] {
		// Each reference would copy the item again: a small body of
		// references to one large item would expand without bound.
		return it, pipeline.BadRequest(param+".id", "duplicate item found with this id; give each item once")
	}
	ref := gjson.Result{}
	if resolve != nil {
		var err error
		if ref, err = resolve(id); err != nil {
			return it, lookupError(err)
		}
	}
	if !ref.IsObject() || ref.Get("type").String() == "item_reference" {
		// OpenAI's answer, and a natively served request's.
		return it, pipeline.ItemNotFound(id)
	}
	if h.previous != "" && (itemResponse(id) == h.previous || ref.Get("type").Str == "function_call" && h.priorCalls[ref.Get("call_id").Str]) {
		// OpenAI's answer too: the conversation of previous_response_id
		// already holds the item.
		return it, pipeline.BadRequest(param+".id", "Duplicate item found with id %s. Remove duplicate items from your input and try again.", id)
	}
	h.markRef(id)
	return ref, nil
}

// lookupError is the answer to a Resolver that could not look: over the
// bound on stored responses one request reads (400), or a store that
// failed (503: not a missing item, whose 404 would tell the client to drop
// what it holds).
func lookupError(err error) error {
	if errors.Is(err, ErrTooManyReferenced) {
		return pipeline.BadRequest("input", "input may name items of at most %d stored responses (and at most %d approval requests)", maxReferenced, maxHeldReads)
	}
	return StoreUnavailable(err)
}

// StoreUnavailable is the 503 of a stored-responses store that failed: a
// retry may find it back, unlike a missing item's 404.
func StoreUnavailable(err error) error {
	return pipeline.Unavailable(pipeline.CodeStoreUnavailable, time.Second, err, "stored responses are unavailable; retry the request")
}

// itemResponse is the id of the response an item id this gateway minted
// ("<kind>_<x>_<n>") names, "resp_<x>"; "" for another id.
func itemResponse(itemID string) string {
	_, rest, ok := strings.Cut(itemID, "_")
	if i := strings.LastIndexByte(rest, '_'); ok && i > 0 {
		return "resp_" + rest[:i]
	}
	return ""
}

// markRef notes that the stored item id was given.
func (h *history) markRef(id string) {
	if h.refs == nil {
		h.refs = map[string]bool{}
	}
	h.refs[id] = true
}

// required is the 400 OpenAI answers for an item without one of keys (a
// non-empty string each): a tool result with no call_id would reach the
// model as the answer to no call.
func required(it gjson.Result, param string, keys ...string) error {
	for _, k := range keys {
		if v := it.Get(k); v.Type != gjson.String || v.Str == "" {
			return pipeline.BadRequest(param+"."+k, "Missing required parameter: '%s.%s'.", param, k)
		}
	}
	return nil
}

// item adds one input item, references resolved.
func (h *history) item(it gjson.Result, param string) error {
	typ := it.Get("type").String()
	switch typ {
	case "", "message":
		return h.message(it, param)
	case "function_call":
		if err := required(it, param, "call_id", "name"); err != nil {
			return err
		}
		// A string, as OpenAI requires: stored as sent, an object here
		// would be listed back by input_items against the schema.
		switch args := it.Get("arguments"); {
		case !args.Exists():
			return pipeline.BadRequest(param+".arguments", "Missing required parameter: '%s.arguments'.", param)
		case args.Type != gjson.String:
			return pipeline.BadRequest(param+".arguments", "Invalid '%s.arguments': expected a string.", param)
		}
		h.call(toolCall(it.Get("call_id").String(), it.Get("name").String(), it.Get("arguments").String()))
		return nil
	case "function_call_output":
		if err := required(it, param, "call_id"); err != nil {
			return err
		}
		out, err := outputText(it.Get("output"), param+".output")
		if err != nil {
			return err
		}
		h.add(toolResult(it.Get("call_id").String(), out), "tool")
		return nil
	case "mcp_call":
		// A tool this gateway ran, replayed by a client that keeps its own
		// history: the model sees the call and its result as it did then.
		id := it.Get("id").String()
		approved := it.Get("approval_request_id").String()
		if approved != "" && h.settled {
			// A gated call run on a person's approval: the history it
			// joins holds the call and, in its decision's place, this
			// result (the loop settled it there).
			return nil
		}
		if approved != "" && h.asked[approved] {
			// Replayed after its approval request (and the decision): the
			// call is that request's, and its result takes the
			// decision's place, as the model saw it.
			out, known, err := h.mcpOutput(it, id, param)
			if err != nil {
				return err
			}
			if !known {
				// The decision's place must hold a result, or the loop
				// would apply the approval again and run the call again.
				out = unkeptResult
			}
			h.settle(approved, toolResult(approved, out))
			return nil
		}
		out, known, err := h.mcpOutput(it, id, param)
		if err != nil {
			return err
		}
		if !known {
			// Replayed without its output (@openai/agents does), and not
			// stored (store: false): the call is left out, as a client
			// that keeps no server calls leaves it. An empty result
			// would tell the model the tool returned nothing; left out,
			// a mixed turn's kept server calls and results take its
			// place (the tool loop's resume), and an older one is a turn
			// whose hidden calls the model no longer sees. The texts
			// around it are one turn's: they join (history.join).
			h.joinNext = h.open >= 0 && len(h.calls) == 0
			return nil
		}
		h.call(toolCall(id, it.Get("name").String(), it.Get("arguments").String()))
		h.results = append(h.results, toolResult(id, out))
		return nil
	case "mcp_approval_request":
		// A gated call this gateway handed out, replayed by the client.
		h.call(toolCall(it.Get("id").String(), it.Get("name").String(), it.Get("arguments").String()))
		h.ask(it.Get("id").String())
		return nil
	case "mcp_approval_response":
		// The person's decision, as the tool loop reads it from the
		// answering tool message.
		if id := it.Get("approval_request_id").String(); !h.asked[id] {
			return pipeline.BadRequest(param+".approval_request_id",
				"no mcp_approval_request with the id %.64q comes before this response: give the request item (or previous_response_id of the response that made it)", id)
		}
		d := []byte(`{"decision":"approve"}`)
		if it.Get("approve").Type != gjson.True {
			d = []byte(`{"decision":"reject"`)
			if r := it.Get("reason"); r.Type == gjson.String && r.Str != "" {
				d = append(d, `,"message":`...)
				d = append(d, r.Raw...)
			}
			d = append(d, '}')
		}
		h.add(toolResult(it.Get("approval_request_id").String(), string(d)), "tool")
		return nil
	case "reasoning":
		return nil // reasoning is not sent back to chat upstreams
	}
	return pipeline.BadRequest(param+".type", "input items of type %q are not supported by this gateway", typ)
}

// mcpOutput is an mcp_call item's result as its tool message holds it: its
// output, or its error. @openai/agents replays an mcp_call without its
// output, which it expects the server to have kept: the output (or error)
// of the item stored under that id is taken, once per id, as a reference
// (small items naming one stored output must not expand without bound).
func (h *history) mcpOutput(it gjson.Result, id, param string) (out string, known bool, err error) {
	if o, e := it.Get("output"), it.Get("error"); o.Type == gjson.Null && e.Type == gjson.Null && h.lookup != nil {
		if h.refs[id] {
			return "", false, pipeline.BadRequest(param+".id", "duplicate item found with this id; give each item once")
		}
		st, err := h.lookup(id)
		switch {
		case errors.Is(err, ErrTooManyReferenced):
			// Past the bound the output is not known, as when nothing
			// stored it: @openai/agents replays every earlier mcp_call
			// of a conversation this way, and a long one would be
			// refused for good.
			st = gjson.Result{}
		case err != nil:
			return "", false, lookupError(err)
		}
		if st.Get("type").Str == "mcp_call" && st.Get("name").Str == it.Get("name").Str {
			it = st
			h.markRef(id)
		}
	}
	o, e := it.Get("output"), it.Get("error")
	out = o.String()
	switch {
	case e.Type == gjson.String: // OpenAI's form: the error's text
		out = "error: " + e.Str
	case e.IsObject(): // the gateway's: {type, content}
		out = "error: " + e.Get("content").String()
	case e.Type != gjson.Null:
		out = "error: " + e.Raw
	}
	return out, o.Type != gjson.Null || e.Type != gjson.Null, nil
}

// unkeptResult is the result the model is shown of a call approved and
// run whose output the client's replay left out and nothing stored: a
// result in the gateway's own form, which the tool loop shows as it is
// rather than read as a decision (once the approval's record has expired,
// a decision would tell the model the tool was not run).
const unkeptResult = `{"status":"error","error":{"type":"result_not_kept","message":"the tool ran, but its result was not kept (the response was not stored) and the replayed call did not carry it"}}`

// settle puts result in the place of the tool message that answers call id
// (a person's decision), or adds it when there is none.
func (h *history) settle(id, result string) {
	for _, list := range [][]string{h.msgs, h.results} {
		for i, m := range list {
			if gjson.Get(m, "role").Str == "tool" && gjson.Get(m, "tool_call_id").Str == id {
				list[i] = result
				return
			}
		}
	}
	h.add(result, "tool")
}

func toolCall(id, name, args string) string {
	b := []byte(`{"id":`)
	b = jsonstring.Append(b, id)
	b = append(b, `,"type":"function","function":{"name":`...)
	b = jsonstring.Append(b, name)
	b = append(b, `,"arguments":`...)
	b = jsonstring.Append(b, args)
	return string(append(b, "}}"...))
}

func toolResult(id, content string) string {
	b := []byte(`{"role":"tool","tool_call_id":`)
	b = jsonstring.Append(b, id)
	b = append(b, `,"content":`...)
	b = jsonstring.Append(b, content)
	return string(append(b, '}'))
}

// outputText is a function_call_output's output as text: a string as is,
// the texts of a list of parts joined. A chat tool message carries text
// only: an image or a file part is a note that it was there, never dropped
// without a word; a part of another type is refused.
func outputText(v gjson.Result, param string) (string, error) {
	switch {
	case v.Type == gjson.String:
		return v.Str, nil
	case !v.IsArray():
		return "", pipeline.BadRequest(param, "output must be a string or an array of parts")
	}
	var sb strings.Builder
	var err error
	i := 0
	v.ForEach(func(_, p gjson.Result) bool {
		switch typ := p.Get("type").String(); typ {
		case "input_text", "output_text", "text":
			t, terr := partText(p, param+"["+strconv.Itoa(i)+"]")
			if terr != nil {
				err = terr
				return false
			}
			sb.WriteString(t)
		case "input_image", "input_file":
			// A chat tool message holds text only. The agents SDKs send a
			// tool's image this way: the model is told it was there, as
			// those SDKs tell a chat model themselves, rather than the run
			// failing.
			sb.WriteString("[the tool returned " + strings.TrimPrefix(typ, "input_") + " content, which this model's tool results cannot carry]")
		default:
			err = pipeline.BadRequest(param+"["+strconv.Itoa(i)+"].type",
				"function_call_output parts of type %q are not supported: a chat model's tool result is text", typ)
			return false
		}
		i++
		return true
	})
	return sb.String(), err
}

func (h *history) message(it gjson.Result, param string) error {
	role := it.Get("role").String()
	switch role {
	case "user", "system", "developer", "assistant":
	default:
		return pipeline.BadRequest(param+".role", "role must be one of user, system, developer, assistant")
	}
	b := []byte(`{"role":"`)
	b = append(b, role...)
	b = append(b, `","content":`...)
	content := it.Get("content")
	switch {
	case content.Type == gjson.String:
		b = append(b, content.Raw...)
	case content.IsArray() && (role == "assistant" || role == "system" || role == "developer"):
		// Chat takes only text parts here: join them. An assistant's
		// refusal parts are its message's refusal, as chat has it.
		var text, refusal strings.Builder
		var err error
		i := 0
		content.ForEach(func(_, p gjson.Result) bool {
			defer func() { i++ }()
			switch t := p.Get("text"); {
			case t.Exists() || strings.HasSuffix(p.Get("type").Str, "text"):
				var s string
				if s, err = partText(p, param+".content["+strconv.Itoa(i)+"]"); err != nil {
					return false
				}
				text.WriteString(s)
			case role == "assistant":
				refusal.WriteString(p.Get("refusal").String())
			default:
				text.WriteString(p.Get("refusal").String())
			}
			return true
		})
		if err != nil {
			return err
		}
		b = jsonstring.Append(b, text.String())
		if refusal.Len() > 0 {
			b = jsonstring.Append(append(b, `,"refusal":`...), refusal.String())
		}
	case content.IsArray():
		var err error
		if b, err = appendParts(b, content, param+".content"); err != nil {
			return err
		}
	default:
		return pipeline.BadRequest(param+".content", "content must be a string or an array of parts")
	}
	h.add(string(append(b, '}')), role)
	return nil
}

// partText is a text part's text, which must be a string: a number or a
// missing text, sent on as its string or "", would ask the model something
// the client never wrote.
func partText(p gjson.Result, param string) (string, error) {
	t := p.Get("text")
	if t.Type != gjson.String {
		return "", pipeline.BadRequest(param+".text", "a text part's text must be a string")
	}
	return t.Str, nil
}

// appendParts appends a user message's content parts in chat's form.
func appendParts(b []byte, parts gjson.Result, param string) ([]byte, error) {
	b = append(b, '[')
	i := 0
	var err error
	parts.ForEach(func(_, p gjson.Result) bool {
		if i > 0 {
			b = append(b, ',')
		}
		switch p.Get("type").String() {
		case "input_text", "output_text", "text":
			t, terr := partText(p, param+"["+strconv.Itoa(i)+"]")
			if terr != nil {
				err = terr
				return false
			}
			b = append(b, `{"type":"text","text":`...)
			b = jsonstring.Append(b, t)
			b = append(b, '}')
		case "input_image":
			url := p.Get("image_url")
			if url.Type != gjson.String {
				err = pipeline.BadRequest(param+"["+strconv.Itoa(i)+"]", "input_image needs an image_url (file ids are not supported)")
				return false
			}
			b = append(b, `{"type":"image_url","image_url":{"url":`...)
			b = append(b, url.Raw...)
			if d := p.Get("detail"); d.Type == gjson.String {
				b = append(b, `,"detail":`...)
				b = append(b, d.Raw...)
			}
			b = append(b, "}}"...)
		case "input_file":
			b = append(b, `{"type":"file","file":{`...)
			n := 0
			for _, k := range [...]string{"file_id", "file_data", "filename"} {
				if v := p.Get(k); v.Type == gjson.String {
					if n > 0 {
						b = append(b, ',')
					}
					b = append(b, '"')
					b = append(b, k...)
					b = append(b, `":`...)
					b = append(b, v.Raw...)
					n++
				}
			}
			b = append(b, "}}"...)
		default:
			err = pipeline.BadRequest(param+"["+strconv.Itoa(i)+"].type", "content parts of type %q are not supported", p.Get("type").String())
			return false
		}
		i++
		return true
	})
	return append(b, ']'), err
}

func appendTools(c []byte, tools gjson.Result) ([]byte, error) {
	if !tools.IsArray() {
		return c, pipeline.BadRequest("tools", "tools must be an array")
	}
	arr := tools.Array()
	if len(arr) == 0 {
		return c, nil
	}
	start := len(c)
	c = append(c, `,"tools":[`...)
	n := 0
	for i, t := range arr {
		if gatewayMCP(t) {
			continue
		}
		if t.Get("type").String() != "function" {
			return c, pipeline.BadRequest("tools["+strconv.Itoa(i)+"].type",
				"tools of type %q are not supported by this gateway; configure server tools instead", t.Get("type").String())
		}
		name := t.Get("name")
		if name.Type != gjson.String || name.Str == "" {
			return c, pipeline.BadRequest("tools["+strconv.Itoa(i)+"].name", "a function tool needs a name")
		}
		if n > 0 {
			c = append(c, ',')
		}
		n++
		// The response object repeats each tool as sent (echoTools): one
		// of another type would be dropped or replaced on the way to the
		// model (a schema sent as a string became a tool of no arguments)
		// while the response claimed it, so it is refused, as OpenAI does.
		d, p, st := t.Get("description"), t.Get("parameters"), t.Get("strict")
		at := "tools[" + strconv.Itoa(i) + "]."
		switch {
		case d.Exists() && d.Type != gjson.Null && d.Type != gjson.String:
			return c, pipeline.BadRequest(at+"description", "Invalid '%sdescription': expected a string.", at)
		case p.Exists() && p.Type != gjson.Null && !p.IsObject():
			return c, pipeline.BadRequest(at+"parameters", "Invalid '%sparameters': expected an object (a JSON schema).", at)
		case st.Exists() && st.Type != gjson.Null && st.Type != gjson.True && st.Type != gjson.False:
			return c, pipeline.BadRequest(at+"strict", "Invalid '%sstrict': expected a boolean.", at)
		}
		c = append(c, `{"type":"function","function":{"name":`...)
		c = append(c, name.Raw...)
		if d.Type == gjson.String {
			c = append(c, `,"description":`...)
			c = append(c, d.Raw...)
		}
		c = append(c, `,"parameters":`...)
		if p.IsObject() {
			c = append(c, p.Raw...)
		} else {
			c = append(c, `{"type":"object","properties":{}}`...)
		}
		if st.Type == gjson.True || st.Type == gjson.False {
			c = append(c, `,"strict":`...)
			c = append(c, st.Raw...)
		}
		c = append(c, "}}"...)
	}
	if n == 0 {
		return c[:start], nil // only the gateway's own: the chat request offers none of the client's
	}
	return append(c, ']'), nil
}

// gatewayMCP reports whether t declares the gateway itself as an MCP
// server ({"type":"mcp","server_label":"gateway"}): the server tools the
// gateway runs are its config's, offered by its policy, and the
// declaration only lets a client route the gateway's mcp_approval_request
// items, which carry that label (the Agents SDK asks for a hosted MCP tool
// of the label before it surfaces an approval as an interruption).
func gatewayMCP(t gjson.Result) bool {
	return t.Get("type").String() == "mcp" && t.Get("server_label").String() == "gateway"
}

func appendToolChoice(c []byte, tc gjson.Result) ([]byte, error) {
	switch {
	case !tc.Exists() || tc.Type == gjson.Null:
		return c, nil
	case tc.Type == gjson.String:
		switch tc.Str {
		case "auto", "none", "required":
			c = append(c, `,"tool_choice":`...)
			return append(c, tc.Raw...), nil
		}
	case tc.IsObject():
		switch tc.Get("type").String() {
		case "function":
			if n := tc.Get("name"); n.Type != gjson.String || n.Str == "" {
				return c, pipeline.BadRequest("tool_choice.name", "Missing required parameter: 'tool_choice.name'.")
			}
			c = append(c, `,"tool_choice":{"type":"function","function":{"name":`...)
			c = jsonstring.Append(c, tc.Get("name").String())
			return append(c, "}}"...), nil
		case "allowed_tools":
			if m := tc.Get("mode"); m.Type != gjson.String || (m.Str != "auto" && m.Str != "required") {
				return c, pipeline.BadRequest("tool_choice.mode", "Invalid 'tool_choice.mode': expected one of auto, required.")
			}
			if !tc.Get("tools").IsArray() {
				return c, pipeline.BadRequest("tool_choice.tools", "Invalid 'tool_choice.tools': expected an array of tools.")
			}
			c = append(c, `,"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":`...)
			c = jsonstring.Append(c, tc.Get("mode").String())
			c = append(c, `,"tools":[`...)
			n := 0
			tc.Get("tools").ForEach(func(_, t gjson.Result) bool {
				if t.Get("type").String() == "function" {
					if n > 0 {
						c = append(c, ',')
					}
					c = append(c, `{"type":"function","function":{"name":`...)
					c = jsonstring.Append(c, t.Get("name").String())
					c = append(c, "}}"...)
					n++
				}
				return true
			})
			return append(c, "]}}"...), nil
		}
	}
	return c, pipeline.BadRequest("tool_choice", "tool_choice must be auto, none, required, a function or allowed_tools")
}

func appendFormat(c []byte, text gjson.Result) ([]byte, error) {
	f := text.Get("format")
	switch f.Get("type").String() {
	case "", "text":
		return c, nil
	case "json_object":
		return append(c, `,"response_format":{"type":"json_object"}`...), nil
	case "json_schema":
		// The response object echoes text whole: a format the schema
		// refuses would make every answer to it invalid.
		if n := f.Get("name"); n.Type != gjson.String || n.Str == "" {
			return c, pipeline.BadRequest("text.format.name", "a json_schema format needs a name")
		}
		if !f.Get("schema").IsObject() {
			return c, pipeline.BadRequest("text.format.schema", "a json_schema format needs a schema object")
		}
		c = append(c, `,"response_format":{"type":"json_schema","json_schema":{"name":`...)
		c = jsonstring.Append(c, f.Get("name").String())
		for _, k := range [...]string{"schema", "strict", "description"} {
			if v := f.Get(k); v.Exists() && v.Type != gjson.Null {
				c = append(c, `,"`...)
				c = append(c, k...)
				c = append(c, `":`...)
				c = append(c, v.Raw...)
			}
		}
		return append(c, "}}"...), nil
	}
	return c, pipeline.BadRequest("text.format.type", "text.format.type must be text, json_object or json_schema")
}
