// Package toolprompt makes models without native function calling
// tool-capable: a model-call middleware that describes the request's tools
// in a system prompt, renders earlier calls and results as text, and parses
// the model's text back into native tool calls, so that the tool loop, the
// stream encoder and every client see ordinary tool_calls.
//
// Two formats: "fenced" (the default), a ```tool_calls block of JSON
// calls at the end of the reply, whose preceding text streams live; and
// "json_schema", structured output of {thought, calls | answer} for
// upstreams that support response_format.
package toolprompt

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// Options configures the middleware of one model.
type Options struct {
	// Format is "fenced" (default) or "json_schema".
	Format string
	// Prompt replaces the format's default system prompt; it must hold
	// "{tools}", where the tool list goes.
	Prompt string
	// MaxErrors is how many malformed replies in a row are sent back to the
	// model with what was wrong before its text is taken as the answer
	// (tool_loop.max_consecutive_errors).
	MaxErrors int
	// TakeCall, when set, is asked before each re-ask whether the request
	// may make one more model call, the re-ask (toolloop.TakeModelCall): a
	// re-ask is a model call, counted against tool_loop.max_model_calls and
	// admitted by the tenant's limits and budgets. Refused, the reply is
	// taken as it is, as after MaxErrors; a reply that must call a tool
	// (tool_choice) fails with a limit's or budget's own refusal (429),
	// else as unmet.
	TakeCall func(context.Context, *pipeline.Request) error
	Logger   zerolog.Logger
}

// New returns the prompted tool-calling middleware.
func New(o Options) pipeline.Middleware {
	schema := o.Format == "json_schema"
	prompt := o.Prompt
	switch {
	case prompt != "":
	case schema:
		prompt = DefaultSchemaPrompt
	default:
		prompt = DefaultPrompt
	}
	return func(next pipeline.Handler) pipeline.Handler {
		return &handler{next: next, schema: schema, prompt: prompt, maxErrors: o.MaxErrors, take: o.TakeCall, log: o.Logger}
	}
}

type handler struct {
	next      pipeline.Handler
	schema    bool
	prompt    string
	maxErrors int
	take      func(context.Context, *pipeline.Request) error
	log       zerolog.Logger
}

// Chat rewrites the request for a model without tools, and its answer back
// into tool calls.
func (h *handler) Chat(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
	rw, err := h.rewrite(req.Body, req.FinalRound)
	if err != nil {
		if pe := (*pipeline.Error)(nil); errors.As(err, &pe) {
			return nil, pe
		}
		return nil, pipeline.BadRequest("messages", "the request could not be rendered for a model without tool calling")
	}
	if rw == nil {
		return h.next.Chat(ctx, req)
	}
	if rw.names != nil && req.Field(pipeline.FieldN).Int() > 1 {
		// The calls are read from one reply: the others would be billed
		// upstream and dropped here.
		return nil, pipeline.BadRequest("n", "n greater than 1 is not supported with tools on a model without native tool calling (tool_calling = \"prompted\")")
	}
	up := req.Clone()
	up.Body = rw.body
	up.Messages.Rewrite() // tool results merged, calls turned into text
	up.Lookahead = nil    // the block's text is held back: see pipeline.Lookahead
	resp, err := h.next.Chat(ctx, up)
	if err != nil || rw.names == nil {
		return resp, err
	}
	if resp.Stream != nil {
		return &pipeline.Response{Stream: h.newStream(ctx, up, rw, resp.Stream)}, nil
	}
	return h.blocking(ctx, up, rw, resp.Body)
}

// tries counts the re-asks of one model call.
type tries struct {
	malformed int
	reasked   bool
}

// outcome is what one upstream reply said.
type outcome struct {
	text  []byte // everything the model wrote in content
	shown []byte // the text to show the client (before the block, or the answer)
	found bool   // a block (or structured reply) was read
	calls []Call
	err   error // the block or structured reply was malformed
	cut   bool  // the upstream cut the reply (finish_reason "length" or "content_filter")
	// spent: the attempts so far used the request's whole output cap (by
	// their usage): no attempt may follow.
	spent  bool
	used   int64  // the attempts' output tokens so far, by their usage
	finish string // the answer's finish_reason when not the upstream's ("length": the cap ended it)
}

// ended gives up on asking again, because the upstream cut the reply or
// the output cap is spent: the answer is what the reply said, and a spent
// cap, not the model, ended it ("length"; a cut keeps the upstream's
// reason).
func (o *outcome) ended() {
	if o.spent && !o.cut {
		o.finish = "length"
	}
}

// upstreamEnd notes how the attempt ended: its upstream finish_reason (a
// reply cut at the limit or by a filter would most likely be cut again if
// asked again) and the output tokens used so far (usage, the attempts'
// summed) against the request's cap.
func (o *outcome) upstreamEnd(finish string, usage []byte, c wire.OutputCap) {
	o.cut = finish == "length" || finish == "content_filter"
	o.used = completionOf(usage)
	o.spent = c.Spent(o.used)
}

// judge decides what to do with an outcome of up, the one rule of both
// forms: a non-empty retry is sent back to the model as a tool error
// result (a model call, taken from the request's and counted on up's
// Meta); err fails the call; otherwise o is delivered (as calls when it
// has some).
func (h *handler) judge(ctx context.Context, up *pipeline.Request, rw *rewritten, o *outcome, t *tries) (retry string, err error) {
	retry, err = h.rule(rw, o, t)
	if retry == "" || err != nil {
		return retry, err
	}
	if h.take != nil {
		if refused := h.take(ctx, up); refused != nil {
			// No model call left to ask again with: as after the last
			// re-ask.
			if o.err != nil {
				h.giveUp(rw, o)
				return "", nil
			}
			var pe *pipeline.Error
			if errors.As(refused, &pe) && pe.Status == http.StatusTooManyRequests {
				return "", refused // a spent budget or a limit says so, not the model
			}
			return "", choiceUnmet()
		}
	}
	up.Meta.NoteReask()
	return retry, nil
}

// giveUp gives up on a malformed reply's calls: its text is the answer,
// or, in the json_schema format when the protocol was asked for (under
// "none" it was not: the reply is text), what structuredText finds in it.
func (h *handler) giveUp(rw *rewritten, o *outcome) {
	o.calls, o.shown = nil, o.text
	if h.schema && rw.choice != choiceNone {
		o.shown = structuredText(o.text)
	}
}

// choiceUnmet is the error of a reply without the call tool_choice
// requires, after its re-ask.
func choiceUnmet() error {
	return pipeline.Errorf(http.StatusBadGateway, pipeline.TypeUpstream, pipeline.CodeToolChoiceUnmet,
		"the model did not call a tool as tool_choice requires")
}

// rule is judge's rule: what an outcome asks for, before it is known
// whether the request may make the call a re-ask is.
func (h *handler) rule(rw *rewritten, o *outcome, t *tries) (retry string, err error) {
	if rw.choice == choiceNamed && o.err == nil {
		// A named tool_choice: the calls of that tool only, as a native
		// model under it calls that function and no other.
		o.calls = slices.DeleteFunc(o.calls, func(c Call) bool { return c.Name != rw.named })
	}
	if rw.single && len(o.calls) > 1 {
		o.calls = o.calls[:1] // parallel_tool_calls false: the first call, as a native model makes one
	}
	if o.err == nil {
		for _, c := range o.calls {
			if !slices.Contains(rw.names, c.Name) {
				o.err = fmt.Errorf("there is no tool named %q; the tools are: %s", c.Name, strings.Join(rw.names, ", "))
				break
			}
		}
	}
	if o.err != nil {
		if o.cut || o.spent {
			// Cut inside its block (or the output cap spent): asked again,
			// the reply would most likely be cut again (as the tool loop
			// does not go on from a native round the upstream cut). The
			// answer is the text before the block (a structured reply's
			// answer so far), with the upstream's finish_reason; the
			// block's fragment is protocol, not text.
			o.calls = nil
			if h.schema {
				o.shown = partialAnswer(o.text)
			}
			o.ended()
			return "", nil
		}
		if t.malformed < h.maxErrors && rw.choice != choiceNone {
			t.malformed++
			return fmt.Sprintf("### error\nYour tool call could not be used: %v. Write the calls again as the format says.", o.err), nil
		}
		h.giveUp(rw, o)
		return "", nil
	}
	missing := ""
	switch {
	case rw.choice == choiceRequired && len(o.calls) == 0:
		missing = "You must call at least one tool now."
	case rw.choice == choiceNamed && !slices.ContainsFunc(o.calls, func(c Call) bool { return c.Name == rw.named }):
		missing = fmt.Sprintf("You must call the tool %q now.", rw.named)
	}
	if missing == "" {
		return "", nil
	}
	if o.cut || o.spent {
		// The reply cannot be asked again: it is the answer, as a native
		// model's cut reply without the call is (the tool loop's rule).
		o.ended()
		return "", nil
	}
	if !t.reasked {
		t.reasked = true
		return "### error\n" + missing, nil
	}
	return "", choiceUnmet()
}

// holds reports whether a reply is judged whole before any of its text is
// shown: a required tool, or the json_schema format. Otherwise the text
// before a call block is shown as it comes, also of a reply re-asked.
func (h *handler) holds(rw *rewritten) bool {
	return h.schema || rw.choice == choiceRequired || rw.choice == choiceNamed
}

// reask returns the request of the next attempt: the previous one with the
// model's reply and the error as a tool result, and what the attempts so
// far (used output tokens) left of the request's output cap: the cap
// bounds the answer, not each attempt.
func reask(prev *pipeline.Request, text []byte, msg string, cap wire.OutputCap, used int64) (*pipeline.Request, error) {
	body, err := sjson.SetBytes(prev.Body, "messages.-1", map[string]string{"role": "assistant", "content": string(text)})
	if err == nil {
		body, err = sjson.SetBytes(body, "messages.-1", map[string]string{"role": "user", "content": resultsHead + "\n\n" + msg})
	}
	if err == nil {
		body, err = cap.Left(body, used)
	}
	if err != nil {
		return nil, err
	}
	r := prev.Clone()
	r.Body = body
	return r, nil
}

// read parses a whole reply's content.
func (h *handler) read(content []byte, refused bool) *outcome {
	o := &outcome{text: content}
	if h.schema {
		if refused && len(bytes.TrimSpace(content)) == 0 {
			// A model that declines answers a response_format with a
			// refusal and no content. That is its answer (the refusal
			// goes on as a side text), not a malformed reply to ask
			// again; an empty reply without one is malformed.
			return o
		}
		o.shown, o.found, o.calls, o.err = parseStructured(content)
		return o
	}
	var sc Scanner
	live := append([]byte(nil), sc.Feed(content)...)
	tail, found, calls, err := sc.End()
	o.shown, o.found, o.calls, o.err = append(live, tail...), found, calls, err
	return o
}

// partialAnswer is the text of a json_schema reply cut while it wrote its
// "answer" string ({"thought": "...", "answer": "Par): what a native model
// cut at the same place shows; nil for any other cut reply (a cut call, or
// a cut structured answer, is protocol, not text).
func partialAnswer(b []byte) []byte {
	b = withoutCutEscape(b)
	for _, closer := range [...]string{`"}`, `}`} {
		doc := append(append([]byte(nil), b...), closer...)
		if !jsonvalid.Bytes(doc) {
			continue
		}
		if a := gjson.GetBytes(doc, "answer"); a.Type == gjson.String && len(gjson.GetBytes(doc, "calls").Array()) == 0 {
			return []byte(a.Str)
		}
		return nil
	}
	return nil
}

// withoutCutEscape returns b without an escape its end cut (a backslash
// alone, or "\u" and fewer than four hex digits), so that closing the
// string makes it valid JSON.
func withoutCutEscape(b []byte) []byte {
	for k := 0; k < 6 && k < len(b); k++ {
		i := len(b) - 1 - k
		if b[i] != '\\' {
			continue
		}
		if run := i + 1 - len(bytes.TrimRight(b[:i+1], `\`)); run%2 == 0 {
			return b // an escaped backslash: what follows is text
		}
		if tail := b[i+1:]; len(tail) == 0 || tail[0] == 'u' && len(tail) < 5 && isHex(tail[1:]) {
			return b[:i]
		}
		return b // a whole escape
	}
	return b
}

// isHex reports whether b holds hex digits only.
func isHex(b []byte) bool {
	for _, c := range b {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// parseStructured reads a json_schema reply: {"answer": ...} is text,
// {"calls": [...]} are calls. Anything else is malformed.
func parseStructured(b []byte) (answer []byte, found bool, calls []Call, err error) {
	if !jsonvalid.Bytes(b) || !gjson.ParseBytes(b).IsObject() {
		return nil, true, nil, fmt.Errorf("the reply is not one JSON object")
	}
	res := gjson.GetManyBytes(b, "calls", "answer")
	if res[0].IsArray() && len(res[0].Array()) > 0 {
		calls, err = ParseBlock([]byte(res[0].Raw))
		return nil, true, calls, err
	}
	switch {
	case res[1].Type == gjson.String:
		return []byte(res[1].Str), false, nil, nil
	case res[1].IsObject() || res[1].IsArray():
		// Structured output the client asked for (protocolFormat): the
		// answer is that JSON.
		return []byte(res[1].Raw), false, nil, nil
	case res[0].IsArray():
		// "calls": [] and no answer: a reply without calls, and without
		// text, as an empty block in the fenced format (asked again, a
		// model that chose no call mostly answers the same).
		return nil, false, nil, nil
	}
	return nil, true, nil, fmt.Errorf(`the reply has neither "calls" nor "answer"`)
}

// structuredText is the answer of a json_schema reply given up on (still
// malformed after the re-asks): the answer it holds when there is one
// (an object with prose around it), nothing when it is the protocol
// without one (the model's "thought" is not the client's answer), and the
// text itself when it is no protocol at all (the model answered in prose).
func structuredText(b []byte) []byte {
	j := bytes.LastIndexByte(b, '}')
	// The object: from the first '{' that starts one ending at the last
	// '}' (prose before it may hold braces of its own), a few tried.
	for i, tries := bytes.IndexByte(b, '{'), 0; i >= 0 && i < j && tries < 16; tries++ {
		if obj := b[i : j+1]; jsonvalid.Bytes(obj) {
			res := gjson.GetManyBytes(obj, "answer", "thought", "calls")
			switch {
			case res[0].Type == gjson.String:
				return []byte(res[0].Str)
			case res[0].Exists():
				return []byte(res[0].Raw) // structured output, or a number the model gave as its answer
			case res[1].Exists() || res[2].Exists():
				return nil
			}
			return b
		}
		k := bytes.IndexByte(b[i+1:], '{')
		if k < 0 {
			break
		}
		i += 1 + k
	}
	return b
}

// blocking serves a non-streamed call.
func (h *handler) blocking(ctx context.Context, up *pipeline.Request, rw *rewritten, body []byte) (*pipeline.Response, error) {
	var t tries
	var usage []byte
	var side []wire.Event // every attempt's reasoning and refusal, as a stream shows them
	var before []byte     // the text a stream showed live of the attempts re-asked
	for asked := false; ; asked = true {
		res := gjson.GetManyBytes(body, "choices.0.message.content", "usage", "choices.0.finish_reason", "choices.0.message.tool_calls", "choices.0.message")
		usage = addUsage(usage, res[1])
		if res[3].IsArray() && len(res[3].Array()) > 0 {
			// The model called natively after all: its answer as written,
			// after what the attempts asked again showed (as a stream
			// shows it), with the usage of them all.
			if !asked {
				return &pipeline.Response{Body: body}, nil
			}
			return &pipeline.Response{Body: nativeAfterReasks(body, before, side, usage)}, nil
		}
		for _, k := range sideKeys {
			if v := res[4].Get(k); v.Type == gjson.String && v.Str != "" {
				side = append(side, wire.Event{Kind: wire.Text, Key: k, Text: []byte(v.Str)})
			}
		}
		o := h.read([]byte(res[0].Str), res[4].Get("refusal").Str != "")
		o.upstreamEnd(res[2].Str, usage, rw.cap)
		retry, err := h.judge(ctx, up, rw, o, &t)
		if err != nil {
			return nil, err
		}
		if retry == "" {
			if len(before) > 0 {
				o.shown = append(before, o.shown...)
			}
			return &pipeline.Response{Body: completion(body, o, cmp.Or(o.finish, res[2].Str), usage, side)}, nil
		}
		if !h.holds(rw) {
			before = append(before, o.shown...) // the text before the block
		}
		if up, err = reask(up, o.text, retry, rw.cap, o.used); err != nil {
			return nil, pipeline.Internal(err, "the request could not be extended")
		}
		resp, err := h.next.Chat(ctx, up)
		if err != nil {
			return nil, err
		}
		if resp.Stream != nil {
			resp.Stream.Close()
			return nil, pipeline.Internal(nil, "the upstream streamed an answer that was not asked for")
		}
		body = resp.Body
	}
}

// nativeAfterReasks is the chat.completion of body, a native answer that
// came after re-asks: the earlier attempts' side texts and shown text
// (before) come first, as a stream shows them, and usage is theirs summed.
func nativeAfterReasks(body, before []byte, side []wire.Event, usage []byte) []byte {
	enc := wire.NewChatJSON(headerOf(body, false))
	var out []byte
	for i := range side {
		out = enc.Encode(out, &side[i])
	}
	shown := len(before) == 0
	wire.DecodeCompletion(body, func(e *wire.Event) {
		switch {
		case e.Kind == wire.Text && e.Key == "content" && !shown:
			c := *e
			c.Text = append(append([]byte(nil), before...), e.Text...)
			e, shown = &c, true
		case (e.Kind == wire.CallHeader || e.Kind == wire.Finish) && !shown:
			out = enc.Encode(out, &wire.Event{Kind: wire.Text, Key: "content", Text: before})
			shown = true
		case e.Kind == wire.Usage && len(usage) > 0:
			return // the sum goes out instead, before End
		case e.Kind == wire.Extra:
			return // annotations point into the reply's own text, not the joined one (as the stream, onEvent)
		case e.Kind == wire.End && len(usage) > 0:
			out = enc.Encode(out, &wire.Event{Kind: wire.Usage, Raw: usage})
		}
		out = enc.Encode(out, e)
	})
	return out
}

// sideKeys are the message's texts other than content: the stream forwards
// them as they come, from every attempt, and never reads them as calls.
var sideKeys = [...]string{"reasoning_content", "reasoning", "refusal"}

// completion builds the chat.completion of o on body's id and model, with
// the side texts (reasoning, refusal) of every attempt.
func completion(body []byte, o *outcome, finish string, usage []byte, side []wire.Event) []byte {
	enc := wire.NewChatJSON(headerOf(body, false))
	var out []byte
	for i := range side {
		out = enc.Encode(out, &side[i])
	}
	for _, e := range events(o, finish, usage) {
		out = enc.Encode(out, &e)
	}
	return enc.Encode(out, &wire.Event{Kind: wire.End})
}

// events are the neutral events of a delivered outcome after the role:
// its text, its calls, the finish and the usage.
func events(o *outcome, finish string, usage []byte) []wire.Event {
	ev := []wire.Event{{Kind: wire.Role}}
	if len(o.shown) > 0 {
		ev = append(ev, wire.Event{Kind: wire.Text, Key: "content", Text: o.shown})
	}
	for _, c := range o.calls {
		ev = append(ev, wire.Event{Kind: wire.CallHeader, ID: newCallID(), Name: c.Name},
			wire.Event{Kind: wire.CallArgs, Text: c.Args})
	}
	if len(o.calls) > 0 {
		finish = "tool_calls"
	}
	ev = append(ev, wire.Event{Kind: wire.Finish, Finish: finish})
	if len(usage) > 0 {
		ev = append(ev, wire.Event{Kind: wire.Usage, Raw: usage})
	}
	return ev
}

// headerOf reads what every chunk of the answer repeats from an upstream
// chunk or completion.
func headerOf(b []byte, includeUsage bool) wire.Header {
	res := gjson.GetManyBytes(b, "id", "created", "model", "system_fingerprint", "service_tier")
	return wire.Header{ID: res[0].Str, Created: res[1].Int(), Model: res[2].Str, Fingerprint: res[3].Str,
		ServiceTier: res[4].Str, IncludeUsage: includeUsage}
}

// completionOf is the output tokens of a usage object (addUsage's sum): 0
// without one.
func completionOf(usage []byte) int64 {
	if len(usage) == 0 {
		return 0
	}
	c, _ := wire.ParseChatUsage(gjson.ParseBytes(usage))
	return c.Completion
}

// addUsage adds the token counts of u to sum: the first usage is kept as
// the upstream wrote it; a sum of several is wire.ChatUsage's, every count
// and detail added up (cached and cache-write tokens too), as the tool
// loop sums its rounds.
func addUsage(sum []byte, u gjson.Result) []byte {
	c, ok := wire.ParseChatUsage(u)
	if !ok {
		return sum
	}
	if sum == nil {
		return []byte(u.Raw)
	}
	total, _ := wire.ParseChatUsage(gjson.ParseBytes(sum))
	total.Add(c)
	return total.AppendJSON(sum[:0])
}
