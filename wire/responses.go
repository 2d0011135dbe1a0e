package wire

import (
	"cmp"
	"slices"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
)

// ResponsesHeader is what a Responses API answer repeats in every copy of
// its response object: the id, created_at and model the client sees, and
// Echo, the request's settings as the object reports them: a run of JSON
// members without braces ("instructions":null,"tools":[],…) that the
// request translation builds once. Echo must hold at least the members the
// response object requires besides the ones the encoder writes (id,
// object, created_at, status, model, output, usage, error,
// incomplete_details).
type ResponsesHeader struct {
	ID      string
	Created int64
	Model   string
	Echo    []byte
	// Summary: the request asked for a reasoning summary (reasoning.summary):
	// reasoning text goes as the item's summary_text part
	// (response.reasoning_summary_text.delta), as OpenAI's reasoning models
	// give theirs, not as reasoning_text content.
	Summary bool
	// Logprobs: the request asked for the output text's logprobs (include
	// "message.output_text.logprobs"). The content tokens of the Text
	// events' Logprobs then fill each output_text's logprobs, each delta's
	// with its own tokens; otherwise they stay [], whatever the upstream
	// sent, as OpenAI leaves them.
	Logprobs bool
}

// Responses encodes a response's events in the Responses API's form: as
// the SSE events of a stream (NewResponsesStream) or as one response
// object (NewResponsesJSON). Both forms build the same output items, so a
// streamed answer and a JSON answer of the same events carry the same
// content.
//
// The events map as follows: Role opens the response (response.created and
// response.in_progress); Text with Key "content" or "refusal" is a part of
// the message item (response.output_text.delta, response.refusal.delta);
// Key "reasoning_content" or "reasoning" is a reasoning item with one
// reasoning_text part (response.reasoning_text.delta); CallHeader and CallArgs are a
// function_call item (response.function_call_arguments.delta), numbered
// by Index so that interleaved parallel calls land on their own items, or
// an mcp_approval_request item when the header is marked Approval;
// ServerCall is an mcp_call item, a tool the gateway ran itself, given
// whole; Finish closes every open item (their *.done events) and decides
// the status ("length" is incomplete with reason max_output_tokens,
// "content_filter" incomplete with reason content_filter); Extra's
// url_citation annotations go on the open message's output_text
// (response.output_text.annotation.added, see annotate); Usage is kept
// for the terminal event, which End writes: response.completed or
// response.incomplete, carrying the whole object. Fail ends a stream with
// response.failed instead.
//
// A round of the model (the events up to its Finish, or up to a
// ServerCall, which ends a round of the tool loop) keeps its message item
// open until the round ends: a text that comes after the round's calls
// joins the message already there, as a JSON answer's message holds one
// content text before its calls (otherwise the stream would list a second
// message after the calls, the JSON answer one message before them). A
// reasoning item stays open across calls too, and is done once the
// message's text begins.
//
// Not safe for concurrent use.
type Responses struct {
	h      ResponsesHeader
	stream bool
	seq    int
	opened bool
	ended  bool
	items  []respItem
	msg    int // index of the open message item, -1 for none
	reason int // index of the open reasoning item, -1 for none
	// reasonKey is the member the open reasoning item's text comes from.
	// An upstream may send the same text under both names (vLLM during
	// its rename of reasoning_content to reasoning): the first one an
	// item sees is its text, the other is dropped.
	reasonKey string
	calls     []int
	chars     int64  // characters of every output_text so far (annotate)
	lp        []byte // scratch: a delta's LogProb items
	lpHeld    []byte // LogProb items of tokens without text, for the next output_text (textLogprobs)
	finish    string
	usage     []byte
	fail      []byte // the error object of a failed response
	cancelled bool   // the client left the stream before its end (Cancel)
}

type itemKind uint8

const (
	itemMessage itemKind = iota
	itemReasoning
	itemCall
	itemServerCall
)

type respPart struct {
	refusal  bool
	text     []byte
	logprobs []byte // output_text: its Responses LogProb items, comma-separated
	notes    []byte // output_text: its annotations, comma-separated (annotate)
	nNotes   int
	chars    int64 // output_text: its characters (Unicode code points)
	done     bool
}

type respItem struct {
	kind     itemKind
	id       string
	parts    []respPart // message: output_text / refusal; reasoning: one reasoning_text
	callID   string     // function_call: the client-visible id
	approval bool       // function_call awaiting a person's approval: an mcp_approval_request
	name     string
	args     []byte
	label    string // mcp_call: server_label
	output   []byte // mcp_call
	approved string // mcp_call: the approval request it ran on, when gated
	errMsg   string // mcp_call: the error, when the run failed
	done     bool
	cut      bool // still open when a length or content-filter finish ended the response
}

// NewResponsesStream returns the encoder of a streamed response: Encode
// appends complete SSE events ("event:" and "data:" lines).
func NewResponsesStream(h ResponsesHeader) *Responses {
	return &Responses{h: h, stream: true, msg: -1, reason: -1}
}

// NewResponsesJSON returns the encoder of a JSON answer: Encode records
// the events and appends the response object at End.
func NewResponsesJSON(h ResponsesHeader) *Responses {
	return &Responses{h: h, msg: -1, reason: -1}
}

// Encode appends what e produces (see Responses).
func (r *Responses) Encode(dst []byte, e *Event) []byte {
	if r.ended {
		return dst
	}
	if !r.opened {
		dst = r.open(dst)
	}
	if r.finish != "" && e.Kind != Usage && e.Kind != End {
		return dst // after Finish only usage and the end
	}
	switch e.Kind {
	case Text:
		switch {
		case len(e.Text) == 0:
			if e.Key == "content" && len(e.Logprobs) > 0 {
				dst = r.textLogprobs(dst, e.Logprobs)
			}
		case e.Key == "content" || e.Key == "refusal":
			dst = r.messageText(dst, e.Key == "refusal", e.Text, e.Logprobs)
		case e.Key == "reasoning_content" || e.Key == "reasoning":
			dst = r.reasoningText(dst, e.Key, e.Text)
		}
	case CallHeader:
		dst = r.callHeader(dst, e)
	case CallArgs:
		dst = r.callArgs(dst, e)
	case ServerCall:
		// The loop reports a server call once its round was read whole:
		// every item before it is complete (a mixed turn's client calls
		// too), and is done before the mcp_call is added. Tokens held
		// for a text that did not come have no item to go in (as in
		// the JSON answer, proxy's placeCalls).
		dst = r.closeAll(dst)
		r.lpHeld = r.lpHeld[:0]
		r.items = append(r.items, respItem{kind: itemServerCall, id: r.itemID("mcp"), name: e.Name, args: append([]byte(nil), e.Text...),
			label: e.Key, output: append([]byte(nil), e.Raw...), errMsg: e.Finish, approved: e.ID})
		dst = r.serverCall(dst, len(r.items)-1)
	case Finish:
		r.finish = cmp.Or(e.Finish, "stop")
		dst = r.answered(dst)
		if r.finish == "length" || r.finish == "content_filter" {
			// Only what the cut answer left open is incomplete: an item
			// done before it (an earlier round's, a server call) stays
			// completed, as its output_item.done said.
			for i := range r.items {
				r.items[i].cut = !r.items[i].done
			}
		}
		dst = r.closeAll(dst)
	case Extra:
		dst = r.annotate(dst, e.Raw)
	case Usage:
		r.usage = append(r.usage[:0], e.Raw...)
	case End:
		dst = r.end(dst)
	}
	return dst
}

// callHeader starts a function_call (or mcp_approval_request) item.
func (r *Responses) callHeader(dst []byte, e *Event) []byte {
	for len(r.calls) <= e.Index {
		r.calls = append(r.calls, -1)
	}
	if r.calls[e.Index] >= 0 {
		return dst // a second header for the same call
	}
	r.calls[e.Index] = len(r.items)
	it := respItem{kind: itemCall, id: r.itemID("fc"), callID: e.ID, name: e.Name, approval: e.Approval}
	if e.Approval {
		it.id = e.ID // the id the client's mcp_approval_response names
	}
	r.items = append(r.items, it)
	return r.itemAdded(dst, len(r.items)-1)
}

// callArgs adds a fragment to the arguments of call e.Index.
func (r *Responses) callArgs(dst []byte, e *Event) []byte {
	if e.Index >= len(r.calls) || r.calls[e.Index] < 0 || len(e.Text) == 0 {
		return dst
	}
	i := r.calls[e.Index]
	it := &r.items[i]
	it.args = append(it.args, e.Text...)
	if !r.stream || it.approval {
		return dst
	}
	dst = r.event(dst, "response.function_call_arguments.delta")
	dst = r.itemRef(dst, i)
	dst = append(dst, `,"delta":`...)
	dst = appendString(dst, e.Text)
	return endEvent(dst)
}

// end closes what is open and writes the terminal event (a stream) or the
// response object (JSON).
func (r *Responses) end(dst []byte) []byte {
	if r.finish == "" {
		r.finish = "stop"
		dst = r.answered(dst)
		dst = r.closeAll(dst)
	}
	r.ended = true
	if !r.stream {
		return r.Object(dst)
	}
	typ := "response.completed"
	if r.status() == "incomplete" {
		typ = "response.incomplete"
	}
	dst = r.event(dst, typ)
	dst = append(dst, `,"response":`...)
	dst = r.Object(dst)
	return endEvent(dst)
}

// Fail ends the response as failed with the error's code and message: for
// a stream it appends response.failed; the JSON form records it for
// Object.
func (r *Responses) Fail(dst []byte, code, message string) []byte {
	if r.ended {
		return dst
	}
	if !r.opened {
		dst = r.open(dst)
	}
	r.ended = true
	r.fail = append(r.fail[:0], `{"code":`...)
	r.fail = jsonstring.Append(r.fail, code)
	r.fail = append(r.fail, `,"message":`...)
	r.fail = jsonstring.Append(r.fail, message)
	r.fail = append(r.fail, '}')
	if !r.stream {
		return dst
	}
	dst = r.event(dst, "response.failed")
	dst = append(dst, `,"response":`...)
	dst = r.Object(dst)
	return endEvent(dst)
}

// Cancel ends the response as cancelled, unless it ended already: its
// client left before the end. It writes nothing (no one reads the stream
// any more); Object then shows it cancelled, with what it output until
// then. It reports whether it cancelled.
func (r *Responses) Cancel() bool {
	if r.ended {
		return false
	}
	r.ended, r.cancelled = true, true
	// A call whose arguments were still coming is left out: cut off, it
	// is no call anyone can run or answer, and in the conversation a
	// follow-up continues it would be a call without its result.
	r.items = slices.DeleteFunc(r.items, func(it respItem) bool { return it.kind == itemCall && !it.done })
	return true
}

// Object appends the response object as it stands.
func (r *Responses) Object(dst []byte) []byte {
	status := r.status()
	dst = append(dst, `{"id":`...)
	dst = jsonstring.Append(dst, r.h.ID)
	dst = append(dst, `,"object":"response","created_at":`...)
	dst = strconv.AppendInt(dst, r.h.Created, 10)
	dst = append(dst, `,"status":"`...)
	dst = append(dst, status...)
	dst = append(dst, `","model":`...)
	dst = jsonstring.Append(dst, r.h.Model)
	dst = append(dst, `,"output":[`...)
	for i := range r.items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = r.appendItem(dst, i)
	}
	dst = append(dst, ']')
	if len(r.fail) > 0 {
		dst = append(dst, `,"error":`...)
		dst = append(dst, r.fail...)
	} else {
		dst = append(dst, `,"error":null`...)
	}
	dst = append(dst, `,"incomplete_details":`...)
	switch {
	case status == "incomplete" && r.finish == "content_filter":
		dst = append(dst, `{"reason":"content_filter"}`...)
	case status == "incomplete":
		dst = append(dst, `{"reason":"max_output_tokens"}`...)
	default:
		dst = append(dst, "null"...)
	}
	if len(r.usage) > 0 && status != "in_progress" {
		dst = append(dst, `,"usage":`...)
		dst = AppendResponsesUsage(dst, r.usage)
	}
	if len(r.h.Echo) > 0 {
		dst = append(dst, ',')
		dst = append(dst, r.h.Echo...)
	}
	return append(dst, '}')
}

// Status is the response's status as it stands: in_progress, completed,
// incomplete, failed or cancelled.
func (r *Responses) status() string {
	switch {
	case len(r.fail) > 0:
		return "failed"
	case r.cancelled:
		return "cancelled"
	case !r.ended:
		return "in_progress"
	case r.finish == "length" || r.finish == "content_filter":
		return "incomplete"
	}
	return "completed"
}

// Status reports the response's status as it stands.
func (r *Responses) Status() string { return r.status() }

func (r *Responses) open(dst []byte) []byte {
	r.opened = true
	if !r.stream {
		return dst
	}
	for _, typ := range [...]string{"response.created", "response.in_progress"} {
		dst = r.event(dst, typ)
		dst = append(dst, `,"response":`...)
		dst = r.Object(dst)
		dst = endEvent(dst)
	}
	return dst
}

func (r *Responses) itemID(prefix string) string {
	return prefix + "_" + idSuffix(r.h.ID) + "_" + strconv.Itoa(len(r.items))
}

// idSuffix is the part of a response id after its "resp_" prefix.
func idSuffix(id string) string {
	if len(id) > 5 && id[:5] == "resp_" {
		return id[5:]
	}
	return id
}

// messageText adds a fragment of the message's text (or refusal) and, when
// the request asked for them, the content tokens of its logprobs object lp.
func (r *Responses) messageText(dst []byte, refusal bool, text, lp []byte) []byte {
	if r.reason >= 0 {
		// The reasoning is done once the answer's text begins, as in
		// OpenAI's own streams (a client shows it finished).
		dst = r.closeItem(dst, r.reason)
		r.reason = -1
	}
	if r.msg < 0 {
		r.msg = len(r.items)
		r.items = append(r.items, respItem{kind: itemMessage, id: r.itemID("msg")})
		dst = r.itemAdded(dst, r.msg)
	}
	it := &r.items[r.msg]
	if n := len(it.parts); n == 0 || it.parts[n-1].refusal != refusal {
		if n > 0 {
			dst = r.partDone(dst, r.msg, n-1)
		}
		it.parts = append(it.parts, respPart{refusal: refusal})
		dst = r.partAdded(dst, r.msg, len(it.parts)-1)
	}
	p := len(it.parts) - 1
	it.parts[p].text = append(it.parts[p].text, text...)
	if !refusal {
		n := int64(Characters(text))
		it.parts[p].chars += n
		r.chars += n
	}
	r.lp = r.lp[:0]
	if r.h.Logprobs && !refusal {
		r.lp = append(r.lp, r.lpHeld...)
		r.lpHeld = r.lpHeld[:0]
		r.lp = appendResponsesLogprobs(r.lp, lp)
		it.parts[p].logprobs = appendItems(it.parts[p].logprobs, r.lp)
	}
	if !r.stream {
		return dst
	}
	if refusal {
		dst = r.event(dst, "response.refusal.delta")
	} else {
		dst = r.event(dst, "response.output_text.delta")
	}
	dst = r.partRef(dst, r.msg, p)
	dst = append(dst, `,"delta":`...)
	dst = appendString(dst, text)
	if !refusal {
		dst = appendLogprobs(dst, r.lp) // the delta's own tokens
	}
	return endEvent(dst)
}

// answered adds a message of one empty output_text when the answer, which
// ended whole (not cut), has no message and no call: a model that said
// nothing and called nothing. A response of no message reads to an agent
// (the Agents SDK) as a turn to take again, so it would call the model
// until its turn limit; OpenAI's own answer holds a message.
func (r *Responses) answered(dst []byte) []byte {
	if r.finish == "length" || r.finish == "content_filter" ||
		slices.ContainsFunc(r.items, func(it respItem) bool { return it.kind == itemMessage || it.kind == itemCall }) {
		return dst
	}
	if r.reason >= 0 { // done before the message, as when text begins
		dst = r.closeItem(dst, r.reason)
		r.reason = -1
	}
	r.msg = len(r.items)
	r.items = append(r.items, respItem{kind: itemMessage, id: r.itemID("msg"), parts: []respPart{{}}})
	dst = r.itemAdded(dst, r.msg)
	return r.partAdded(dst, r.msg, 0)
}

// textLogprobs adds the content tokens of lp, which come without text (a
// layer took theirs out: a response guardrail's max_length cut), to the
// open message's output_text, in a delta of no text; with no output_text
// open they wait for the next one.
func (r *Responses) textLogprobs(dst, lp []byte) []byte {
	if !r.h.Logprobs {
		return dst
	}
	var it *respItem
	if r.msg >= 0 {
		it = &r.items[r.msg]
	}
	if it == nil || len(it.parts) == 0 || it.parts[len(it.parts)-1].refusal {
		r.lpHeld = appendResponsesLogprobs(r.lpHeld, lp)
		return dst
	}
	p := len(it.parts) - 1
	r.lp = appendResponsesLogprobs(r.lp[:0], lp)
	if len(r.lp) == 0 {
		return dst // no token to show: no delta
	}
	it.parts[p].logprobs = appendItems(it.parts[p].logprobs, r.lp)
	if !r.stream {
		return dst
	}
	dst = r.event(dst, "response.output_text.delta")
	dst = r.partRef(dst, r.msg, p)
	dst = append(dst, `,"delta":""`...)
	dst = appendLogprobs(dst, r.lp)
	return endEvent(dst)
}

func (r *Responses) reasoningText(dst []byte, key string, text []byte) []byte {
	if r.reason >= 0 && key != r.reasonKey {
		return dst
	}
	if r.reason < 0 {
		r.reasonKey = key
		r.reason = len(r.items)
		r.items = append(r.items, respItem{kind: itemReasoning, id: r.itemID("rs"), parts: []respPart{{}}})
		dst = r.itemAdded(dst, r.reason)
		dst = r.partAdded(dst, r.reason, 0)
	}
	it := &r.items[r.reason]
	it.parts[0].text = append(it.parts[0].text, text...)
	if !r.stream {
		return dst
	}
	if r.h.Summary {
		dst = r.event(dst, "response.reasoning_summary_text.delta")
		dst = r.summaryRef(dst, r.reason)
	} else {
		dst = r.event(dst, "response.reasoning_text.delta")
		dst = r.partRef(dst, r.reason, 0)
	}
	dst = append(dst, `,"delta":`...)
	dst = appendString(dst, text)
	return endEvent(dst)
}

// closeAll closes every item still open, in output order.
func (r *Responses) closeAll(dst []byte) []byte {
	r.msg, r.reason = -1, -1
	for i := range r.items {
		if !r.items[i].done {
			dst = r.closeItem(dst, i)
		}
	}
	return dst
}

// closeItem writes the *.done events of item i.
func (r *Responses) closeItem(dst []byte, i int) []byte {
	it := &r.items[i]
	if it.done {
		return dst
	}
	switch it.kind {
	case itemMessage:
		if n := len(it.parts); n > 0 && !it.parts[n-1].done {
			dst = r.partDone(dst, i, n-1)
		}
	case itemReasoning:
		dst = r.partDone(dst, i, 0)
	case itemCall:
		if r.stream && !it.approval {
			dst = r.event(dst, "response.function_call_arguments.done")
			dst = r.itemRef(dst, i)
			dst = append(dst, `,"name":`...)
			dst = jsonstring.Append(dst, it.name)
			dst = append(dst, `,"arguments":`...)
			dst = appendString(dst, it.args)
			dst = endEvent(dst)
		}
	}
	it.done = true
	return r.itemEvent(dst, "response.output_item.done", i)
}

// serverCall writes the whole life of an mcp_call item at once: the tool
// has already run when the loop reports it.
func (r *Responses) serverCall(dst []byte, i int) []byte {
	it := &r.items[i]
	if !r.stream {
		it.done = true
		return dst
	}
	dst = r.itemAdded(dst, i)
	for _, typ := range [...]string{"response.mcp_call.in_progress", "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done"} {
		dst = r.event(dst, typ)
		dst = r.itemRef(dst, i)
		switch typ {
		case "response.mcp_call_arguments.delta":
			dst = append(dst, `,"delta":`...)
			dst = appendString(dst, it.args)
		case "response.mcp_call_arguments.done":
			dst = append(dst, `,"arguments":`...)
			dst = appendString(dst, it.args)
		}
		dst = endEvent(dst)
	}
	if it.errMsg != "" {
		dst = r.event(dst, "response.mcp_call.failed")
	} else {
		dst = r.event(dst, "response.mcp_call.completed")
	}
	dst = r.itemRef(dst, i)
	dst = endEvent(dst)
	return r.closeItem(dst, i)
}

func (r *Responses) itemAdded(dst []byte, i int) []byte {
	return r.itemEvent(dst, "response.output_item.added", i)
}

// itemEvent writes an event of type typ carrying output item i whole.
func (r *Responses) itemEvent(dst []byte, typ string, i int) []byte {
	if !r.stream {
		return dst
	}
	dst = r.event(dst, typ)
	dst = append(dst, `,"output_index":`...)
	dst = strconv.AppendInt(dst, int64(i), 10)
	dst = append(dst, `,"item":`...)
	dst = r.appendItem(dst, i)
	return endEvent(dst)
}

func (r *Responses) partAdded(dst []byte, i, p int) []byte {
	if !r.stream {
		return dst
	}
	if r.summaryOf(i) {
		dst = r.event(dst, "response.reasoning_summary_part.added")
		dst = r.summaryRef(dst, i)
		dst = append(dst, `,"part":`...)
		dst = r.appendPart(dst, i, p)
		return endEvent(dst)
	}
	dst = r.event(dst, "response.content_part.added")
	dst = r.partRef(dst, i, p)
	dst = append(dst, `,"part":`...)
	dst = r.appendPart(dst, i, p)
	return endEvent(dst)
}

// partDone writes the *.done events of content part p of item i: its
// whole text, then content_part.done.
func (r *Responses) partDone(dst []byte, i, p int) []byte {
	part := &r.items[i].parts[p]
	part.done = true
	if !r.stream {
		return dst
	}
	switch {
	case r.summaryOf(i):
		dst = r.event(dst, "response.reasoning_summary_text.done")
		dst = r.summaryRef(dst, i)
		dst = append(dst, `,"text":`...)
		dst = appendString(dst, part.text)
		dst = endEvent(dst)
		dst = r.event(dst, "response.reasoning_summary_part.done")
		dst = r.summaryRef(dst, i)
		dst = append(dst, `,"part":`...)
		dst = r.appendPart(dst, i, p)
		return endEvent(dst)
	case r.items[i].kind == itemReasoning:
		dst = r.event(dst, "response.reasoning_text.done")
		dst = r.partRef(dst, i, p)
		dst = append(dst, `,"text":`...)
	case part.refusal:
		dst = r.event(dst, "response.refusal.done")
		dst = r.partRef(dst, i, p)
		dst = append(dst, `,"refusal":`...)
	default:
		dst = r.event(dst, "response.output_text.done")
		dst = r.partRef(dst, i, p)
		dst = appendLogprobs(dst, part.logprobs)
		dst = append(dst, `,"text":`...)
	}
	dst = appendString(dst, part.text)
	dst = endEvent(dst)
	dst = r.event(dst, "response.content_part.done")
	dst = r.partRef(dst, i, p)
	dst = append(dst, `,"part":`...)
	dst = r.appendPart(dst, i, p)
	return endEvent(dst)
}

// itemRef appends the members that name output item i in an event.
func (r *Responses) itemRef(dst []byte, i int) []byte {
	dst = append(dst, `,"item_id":`...)
	dst = jsonstring.Append(dst, r.items[i].id)
	dst = append(dst, `,"output_index":`...)
	return strconv.AppendInt(dst, int64(i), 10)
}

// summaryRef appends the members that name the summary part of reasoning
// item i in an event (there is one, summary_index 0).
func (r *Responses) summaryRef(dst []byte, i int) []byte {
	dst = r.itemRef(dst, i)
	return append(dst, `,"summary_index":0`...)
}

// summaryOf reports whether item i's text is a reasoning summary.
func (r *Responses) summaryOf(i int) bool {
	return r.h.Summary && r.items[i].kind == itemReasoning
}

func (r *Responses) partRef(dst []byte, i, p int) []byte {
	dst = r.itemRef(dst, i)
	dst = append(dst, `,"content_index":`...)
	return strconv.AppendInt(dst, int64(p), 10)
}

// appendPart appends content part p of item i as it stands.
func (r *Responses) appendPart(dst []byte, i, p int) []byte {
	part := &r.items[i].parts[p]
	if r.summaryOf(i) {
		dst = append(dst, `{"type":"summary_text","text":`...)
		dst = appendString(dst, part.text)
		return append(dst, '}')
	}
	if r.items[i].kind == itemReasoning {
		dst = append(dst, `{"type":"reasoning_text","text":`...)
		dst = appendString(dst, part.text)
		return append(dst, '}')
	}
	return appendPart(dst, part)
}

func appendPart(dst []byte, p *respPart) []byte {
	if p.refusal {
		dst = append(dst, `{"type":"refusal","refusal":`...)
		dst = appendString(dst, p.text)
		return append(dst, '}')
	}
	dst = append(dst, `{"type":"output_text","annotations":[`...)
	dst = append(dst, p.notes...)
	dst = append(dst, ']')
	dst = appendLogprobs(dst, p.logprobs)
	dst = append(dst, `,"text":`...)
	dst = appendString(dst, p.text)
	return append(dst, '}')
}

// appendLogprobs appends the member "logprobs" holding items (LogProb
// objects, comma-separated), [] when there are none.
func appendLogprobs(dst, items []byte) []byte {
	dst = append(dst, `,"logprobs":[`...)
	dst = append(dst, items...)
	return append(dst, ']')
}

// appendItems appends the comma-separated items more to those of list.
func appendItems(list, more []byte) []byte {
	if len(more) == 0 {
		return list
	}
	if len(list) > 0 {
		list = append(list, ',')
	}
	return append(list, more...)
}

// appendItem appends output item i as it stands.
func (r *Responses) appendItem(dst []byte, i int) []byte {
	it := &r.items[i]
	status := "in_progress"
	whole := it.done || r.ended // a failed response shows what it got
	if !it.done && r.ended {
		status = "incomplete"
	}
	if it.done {
		status = "completed"
		if it.cut {
			status = "incomplete"
		}
	}
	switch it.kind {
	case itemMessage:
		dst = append(dst, `{"id":`...)
		dst = jsonstring.Append(dst, it.id)
		dst = append(dst, `,"type":"message","role":"assistant","status":"`...)
		dst = append(dst, status...)
		dst = append(dst, `","content":[`...)
		for p := range it.parts {
			if !r.stream || it.parts[p].done || whole {
				if p > 0 {
					dst = append(dst, ',')
				}
				dst = appendPart(dst, &it.parts[p])
			}
		}
		return append(dst, "]}"...)
	case itemReasoning:
		dst = append(dst, `{"id":`...)
		dst = jsonstring.Append(dst, it.id)
		dst = append(dst, `,"type":"reasoning","summary":[`...)
		if whole && r.h.Summary {
			dst = r.appendPart(dst, i, 0)
		}
		dst = append(dst, `],"status":"`...)
		dst = append(dst, status...)
		dst = append(dst, `","content":[`...)
		if whole && !r.h.Summary {
			dst = r.appendPart(dst, i, 0)
		}
		return append(dst, "]}"...)
	case itemCall:
		if it.approval {
			dst = append(dst, `{"id":`...)
			dst = jsonstring.Append(dst, it.id)
			dst = append(dst, `,"type":"mcp_approval_request","server_label":"gateway","name":`...)
			dst = jsonstring.Append(dst, it.name)
			dst = append(dst, `,"arguments":`...)
			if whole {
				return append(appendString(dst, it.args), '}')
			}
			return append(dst, `""}`...)
		}
		dst = append(dst, `{"id":`...)
		dst = jsonstring.Append(dst, it.id)
		dst = append(dst, `,"type":"function_call","status":"`...)
		dst = append(dst, status...)
		dst = append(dst, `","call_id":`...)
		dst = jsonstring.Append(dst, it.callID)
		dst = append(dst, `,"name":`...)
		dst = jsonstring.Append(dst, it.name)
		dst = append(dst, `,"arguments":`...)
		if whole {
			dst = appendString(dst, it.args)
		} else {
			dst = append(dst, `""`...)
		}
		return append(dst, '}')
	default:
		dst = append(dst, `{"id":`...)
		dst = jsonstring.Append(dst, it.id)
		dst = append(dst, `,"type":"mcp_call","server_label":`...)
		dst = jsonstring.Append(dst, it.label)
		dst = append(dst, `,"name":`...)
		dst = jsonstring.Append(dst, it.name)
		dst = append(dst, `,"arguments":`...)
		if it.done {
			dst = appendString(dst, it.args)
		} else {
			dst = append(dst, `""`...)
		}
		if it.approved != "" {
			dst = append(dst, `,"approval_request_id":`...)
			dst = jsonstring.Append(dst, it.approved)
		}
		switch {
		case !it.done:
			dst = append(dst, `,"status":"in_progress","output":null,"error":null}`...)
		case it.errMsg != "":
			dst = append(dst, `,"status":"failed","output":null,"error":{"type":"mcp_tool_execution_error","content":`...)
			dst = jsonstring.Append(dst, it.errMsg)
			dst = append(dst, "}}"...)
		default:
			dst = append(dst, `,"status":"completed","error":null,"output":`...)
			dst = appendString(dst, it.output)
			dst = append(dst, '}')
		}
		return dst
	}
}

// event starts an SSE event of type typ: its event line, then its JSON up
// to and including sequence_number. endEvent closes it.
func (r *Responses) event(dst []byte, typ string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, typ...)
	dst = append(dst, "\ndata: {\"type\":\""...)
	dst = append(dst, typ...)
	dst = append(dst, `","sequence_number":`...)
	dst = strconv.AppendInt(dst, int64(r.seq), 10)
	r.seq++
	return dst
}

func endEvent(dst []byte) []byte { return append(dst, "}\n\n"...) }

// maxNotes bounds the annotations one output_text keeps: a search model
// cites a handful of sources; an upstream that sends thousands gets the
// first.
const maxNotes = 256

// annotate adds the url_citation annotations among members (an Extra
// event's Raw: "key":value,…) to the output_text of the open message, in
// the Responses form ({"type":"url_citation","end_index",…} where chat
// nests them under "url_citation"), each announced in a stream by
// response.output_text.annotation.added. Chat counts their offsets from
// the start of the whole content, earlier rounds' text included (the tool
// loop shifts them so); here each round's text is a message of its own,
// so they count from the start of this output_text: the characters of
// the output_text parts before it are taken off. An annotation with no
// open output_text to point into (the last round wrote no text), or that
// points before it, is left out, as are other kinds (chat has none).
func (r *Responses) annotate(dst, members []byte) []byte {
	if r.msg < 0 {
		return dst
	}
	it := &r.items[r.msg]
	p := len(it.parts) - 1
	if p < 0 || it.parts[p].refusal {
		return dst
	}
	a := gjson.Get("{"+string(members)+"}", "annotations")
	if !a.IsArray() {
		return dst
	}
	part := &it.parts[p]
	before := r.chars - part.chars // every output_text before this one
	a.ForEach(func(_, v gjson.Result) bool {
		if part.nNotes >= maxNotes {
			return false
		}
		c := v.Get("url_citation")
		start, end, url := c.Get("start_index"), c.Get("end_index"), c.Get("url")
		if v.Get("type").Str != "url_citation" || start.Type != gjson.Number || end.Type != gjson.Number || url.Type != gjson.String {
			return true
		}
		s, e := start.Int()-before, end.Int()-before
		if s < 0 || e < s {
			return true
		}
		at := len(part.notes)
		if part.nNotes > 0 {
			part.notes = append(part.notes, ',')
			at++
		}
		part.notes = append(part.notes, `{"type":"url_citation","end_index":`...)
		part.notes = strconv.AppendInt(part.notes, e, 10)
		part.notes = append(part.notes, `,"start_index":`...)
		part.notes = strconv.AppendInt(part.notes, s, 10)
		part.notes = append(part.notes, `,"title":`...)
		title := c.Get("title")
		if title.Type != gjson.String {
			title.Str = ""
		}
		part.notes = jsonstring.Append(part.notes, title.Str)
		part.notes = append(part.notes, `,"url":`...)
		part.notes = jsonstring.Append(part.notes, url.Str)
		part.notes = append(part.notes, '}')
		if r.stream {
			dst = r.event(dst, "response.output_text.annotation.added")
			dst = r.partRef(dst, r.msg, p)
			dst = append(dst, `,"annotation_index":`...)
			dst = strconv.AppendInt(dst, int64(part.nNotes), 10)
			dst = append(dst, `,"annotation":`...)
			dst = append(dst, part.notes[at:]...)
			dst = endEvent(dst)
		}
		part.nNotes++
		return true
	})
	return dst
}
