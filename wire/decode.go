package wire

import (
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

// ChunkDecoder turns the chat.completion.chunk objects of one stream back
// into events, for the forms that are not chat (Responses). It follows the
// chunks' own tool-call indices, so parallel calls whose fragments
// interleave keep their calls apart, and numbers the calls 0, 1, 2… in the
// order their headers come. A new id at an index in use starts a new call
// (some upstreams send every parallel call at index 0), which takes the
// index over. Not safe for concurrent use.
type ChunkDecoder struct {
	role     bool
	finished bool
	at       []int    // by the chunks' tool-call index: the call it feeds, -1 before its header
	ids      []string // by call: the id its header carried
}

// textKeys are the delta members that carry text, in the order a chunk
// that holds several is read.
var textKeys = [...]string{"reasoning_content", "reasoning", "refusal", "content"}

// Decode calls emit for each event chunk holds. A chunk that is not a JSON
// object, or holds no choice and no usage, emits nothing. The Event passed
// to emit is valid only during the call.
func (d *ChunkDecoder) Decode(chunk []byte, emit func(*Event)) {
	if !jsonvalid.Bytes(chunk) {
		return
	}
	root := gjson.ParseBytes(chunk)
	if !root.IsObject() {
		return
	}
	var e Event
	if c := choiceZero(root.Get("choices")); c.IsObject() {
		if !d.role {
			d.role = true
			e = Event{Kind: Role}
			emit(&e)
		}
		delta := c.Get("delta")
		lp := choiceLogprobs(c)
		emitTexts(delta, lp, emit)
		if lp != nil && noText(delta) && gjson.GetBytes(lp, "content.0").Exists() {
			// Tokens whose text a layer took out (a response
			// guardrail's max_length cut): they go on with the content
			// as the JSON answer keeps them, without text of their own.
			e = Event{Kind: Text, Key: "content", Logprobs: lp}
			emit(&e)
		}
		calls := delta.Get("tool_calls")
		if !calls.IsArray() {
			calls = gjson.Result{} // null: no call (ForEach would visit the null)
		}
		calls.ForEach(func(_, tc gjson.Result) bool {
			i := int(tc.Get("index").Int())
			if i < 0 || i > maxCalls {
				return true
			}
			for len(d.at) <= i {
				d.at = append(d.at, -1)
			}
			id := tc.Get("id").String()
			if j := d.at[i]; j < 0 || id != "" && d.ids[j] != "" && id != d.ids[j] {
				name := tc.Get("function.name").String()
				if id == "" && name == "" || len(d.ids) > maxCalls {
					return true // a fragment before its header: nothing to attach it to
				}
				d.at[i] = len(d.ids)
				d.ids = append(d.ids, id)
				e = Event{Kind: CallHeader, Index: d.at[i], ID: id, Name: name}
				emit(&e)
			}
			if a := tc.Get("function.arguments").String(); a != "" {
				e = Event{Kind: CallArgs, Index: d.at[i], Text: []byte(a)}
				emit(&e)
			}
			return true
		})
		emitAnnotations(delta, emit)
		if f := FinishReason(c); f != "" && !d.finished {
			d.finished = true
			e = Event{Kind: Finish, Finish: f}
			emit(&e)
		}
	}
	if u := root.Get("usage"); u.IsObject() {
		e = Event{Kind: Usage, Raw: []byte(u.Raw)}
		emit(&e)
	}
}

// choiceZero returns the member of choices whose index is 0, or the zero
// Result. A stream of several choices (n > 1) sends each in chunks of its
// own, and the decoded response is choice 0's: another choice's text or
// finish is not its.
func choiceZero(choices gjson.Result) gjson.Result {
	var c gjson.Result
	choices.ForEach(func(_, v gjson.Result) bool {
		if v.Get("index").Int() == 0 {
			c = v
			return false
		}
		return true
	})
	return c
}

// emitTexts emits a Text event for each non-empty text member of obj (a
// delta or a message). The choice's logprobs object lp (nil: none) goes
// with the content text, or with the refusal when there is no content
// text, as the tool loop pairs them: its token lists cover both, and it
// is shown once.
func emitTexts(obj gjson.Result, lp []byte, emit func(*Event)) {
	c := obj.Get("content")
	hasContent := c.Type == gjson.String && c.Str != ""
	for _, k := range textKeys {
		if v := obj.Get(k); v.Type == gjson.String && v.Str != "" {
			e := Event{Kind: Text, Key: k, Text: []byte(v.Str)}
			if k == "content" || k == "refusal" && !hasContent {
				e.Logprobs = lp
			}
			emit(&e)
		}
	}
}

// noText reports whether delta has no text: its content is "" and it has
// no other non-empty text member.
func noText(delta gjson.Result) bool {
	if c := delta.Get("content"); c.Type != gjson.String || c.Str != "" {
		return false
	}
	for _, k := range textKeys {
		if v := delta.Get(k); v.Type == gjson.String && v.Str != "" {
			return false
		}
	}
	return true
}

// choiceLogprobs returns the logprobs object of choice c as its own bytes,
// nil when it has none (or it is not valid JSON: an Event's logprobs are
// written as they are).
func choiceLogprobs(c gjson.Result) []byte {
	if l := c.Get("logprobs"); l.IsObject() && jsonvalid.String(l.Raw) {
		return []byte(l.Raw)
	}
	return nil
}

// maxCalls bounds the tool-call index a chunk may name, so that a hostile
// index cannot make the decoder allocate.
const maxCalls = 1024

// DecodeCompletion calls emit for the events of a whole chat.completion,
// in the order a stream of it would carry them, End last.
func DecodeCompletion(body []byte, emit func(*Event)) {
	root := gjson.ParseBytes(body)
	var e Event
	e = Event{Kind: Role}
	emit(&e)
	msg := root.Get("choices.0.message")
	emitTexts(msg, choiceLogprobs(root.Get("choices.0")), emit)
	i := 0
	calls := msg.Get("tool_calls")
	if !calls.IsArray() {
		calls = gjson.Result{} // "tool_calls": null (SGLang, LiteLLM): no call; ForEach would visit the null
	}
	calls.ForEach(func(_, tc gjson.Result) bool {
		e = Event{Kind: CallHeader, Index: i, ID: tc.Get("id").String(), Name: tc.Get("function.name").String()}
		emit(&e)
		e = Event{Kind: CallArgs, Index: i, Text: []byte(tc.Get("function.arguments").String())}
		emit(&e)
		i++
		return i <= maxCalls
	})
	emitAnnotations(msg, emit)
	finish := root.Get("choices.0.finish_reason").String()
	if finish == "" && i > 0 {
		finish = "tool_calls" // calls without a reason (Ollama, SGLang): as the JSON answer is given one
	}
	e = Event{Kind: Finish, Finish: finish}
	emit(&e)
	if u := root.Get("usage"); u.IsObject() {
		e = Event{Kind: Usage, Raw: []byte(u.Raw)}
		emit(&e)
	}
	e = Event{Kind: End}
	emit(&e)
}

// AppendResponsesUsage appends the Responses API's usage object for a chat
// usage object: input and output tokens, their total, and the cached,
// cache-write and reasoning token details (zero when the upstream did not
// report them).
func AppendResponsesUsage(dst, chat []byte) []byte {
	u, _ := ParseChatUsage(gjson.ParseBytes(chat))
	total := u.Total
	if total == 0 {
		total = u.Prompt + u.Completion
	}
	dst = append(dst, `{"input_tokens":`...)
	dst = strconv.AppendInt(dst, u.Prompt, 10)
	dst = append(dst, `,"input_tokens_details":{"cached_tokens":`...)
	dst = strconv.AppendInt(dst, u.Cached, 10)
	dst = append(dst, `,"cache_write_tokens":`...)
	dst = strconv.AppendInt(dst, u.CacheWrite, 10)
	dst = append(dst, `},"output_tokens":`...)
	dst = strconv.AppendInt(dst, u.Completion, 10)
	dst = append(dst, `,"output_tokens_details":{"reasoning_tokens":`...)
	dst = strconv.AppendInt(dst, u.Reasoning, 10)
	dst = append(dst, `},"total_tokens":`...)
	dst = strconv.AppendInt(dst, total, 10)
	return append(dst, '}')
}

// emitAnnotations emits an Extra event for the annotations of obj (a delta
// or a message: a search model's url_citation items), when it has any.
// Their offsets are the upstream's: characters of the message's content.
func emitAnnotations(obj gjson.Result, emit func(*Event)) {
	a := obj.Get("annotations")
	if !a.IsArray() || isEmpty(a) {
		return
	}
	raw := make([]byte, 0, len(`"annotations":`)+len(a.Raw))
	raw = append(append(raw, `"annotations":`...), a.Raw...)
	e := Event{Kind: Extra, Raw: raw}
	emit(&e)
}
