package wiretest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

// ResponsesSummary is what a checked Responses API stream delivered.
type ResponsesSummary struct {
	Events   []string     // the event types, in order
	Terminal string       // response.completed, response.incomplete or response.failed
	Final    gjson.Result // the terminal event's response object
}

// respItemState is one output item as the checker follows it.
type respItemState struct {
	id    string
	typ   string
	parts map[int]*bytes.Buffer // content index → text so far
	lps   map[int][]any         // content index → the logprobs of its output_text deltas so far
	notes map[int][]any         // content index → the annotations added to its output_text so far
	args  bytes.Buffer
	done  bool
	final gjson.Result // the item its output_item.done carried
}

// CheckResponsesStream checks a Responses API SSE stream against what the
// clients require (docs/wire.md, "The Responses API"): every event has an
// "event:" line naming its data's type and validates against
// ResponseStreamEvent (when schema is set); sequence numbers strictly
// increase; the stream opens with response.created and
// response.in_progress; every lifecycle event carries the whole response
// with one id; output indices are dense and each item is added once, before
// any event about it, and done once; a content part is added before its
// deltas; each *.done text equals its deltas, and an output_text's logprobs
// (on output_text.done and in the terminal response) are its deltas'
// logprobs in order; exactly one terminal event ends the stream, and its
// response lists every item streamed with the same ids and final texts and
// arguments, each as its output_item.done carried it
// (status included: a client that keeps items as they are done sees the
// same output as one that reads the terminal response).
func CheckResponsesStream(raw []byte, schema *Schema) (*ResponsesSummary, error) {
	evs, err := splitTypedEvents(raw)
	if err != nil {
		return nil, err
	}
	c := &respChecker{sum: &ResponsesSummary{}, seq: -1}
	for n, e := range evs {
		if err := c.event(n, e, schema); err != nil {
			return c.sum, err
		}
	}
	if c.sum.Terminal == "" {
		return c.sum, fmt.Errorf("the stream ended without response.completed, response.incomplete or response.failed")
	}
	return c.sum, nil
}

// respChecker follows one Responses stream.
type respChecker struct {
	sum    *ResponsesSummary
	respID string
	seq    int64
	items  []*respItemState
}

// event checks event n: its framing, schema and order, then what it says.
func (c *respChecker) event(n int, e typedEvent, schema *Schema) error {
	if !jsonvalid.Bytes(e.data) {
		return fmt.Errorf("event %d: data is not JSON: %s", n, clip(e.data))
	}
	ev := gjson.ParseBytes(e.data)
	typ := ev.Get("type").Str
	if typ != e.name {
		return fmt.Errorf("event %d: event line %q but type %q", n, e.name, typ)
	}
	if schema != nil {
		if err := schema.Validate("ResponseStreamEvent", e.data); err != nil {
			return fmt.Errorf("event %d (%s): %w", n, typ, err)
		}
	}
	c.sum.Events = append(c.sum.Events, typ)
	if c.sum.Terminal != "" {
		return fmt.Errorf("event %d (%s) after the terminal %s", n, typ, c.sum.Terminal)
	}
	s := ev.Get("sequence_number")
	if !s.Exists() || s.Int() <= c.seq {
		return fmt.Errorf("event %d (%s): sequence_number %s does not increase", n, typ, s.Raw)
	}
	c.seq = s.Int()
	switch {
	case n == 0 && typ != "response.created", n == 1 && typ != "response.in_progress":
		return fmt.Errorf("event %d is %s; a stream opens with response.created, response.in_progress", n, typ)
	}
	switch typ {
	case "response.created", "response.in_progress", "response.completed", "response.incomplete", "response.failed":
		return c.lifecycle(typ, ev.Get("response"))
	case "response.output_item.added":
		return c.added(ev)
	}
	return c.itemEvent(typ, ev)
}

// lifecycle checks an event that carries the whole response.
func (c *respChecker) lifecycle(typ string, r gjson.Result) error {
	if !r.IsObject() || r.Get("id").Str == "" {
		return fmt.Errorf("%s without its response object", typ)
	}
	if c.respID == "" {
		c.respID = r.Get("id").Str
	} else if r.Get("id").Str != c.respID {
		return fmt.Errorf("%s: response id %q changed from %q", typ, r.Get("id").Str, c.respID)
	}
	if typ == "response.created" || typ == "response.in_progress" {
		return nil
	}
	c.sum.Terminal, c.sum.Final = typ, r
	return checkFinal(typ, r, c.items)
}

// added checks a new output item: the next index, an id not seen before.
func (c *respChecker) added(ev gjson.Result) error {
	i := int(ev.Get("output_index").Int())
	if i != len(c.items) {
		return fmt.Errorf("output_item.added with output_index %d; next is %d", i, len(c.items))
	}
	it := ev.Get("item")
	for _, o := range c.items {
		if o.id == it.Get("id").Str {
			return fmt.Errorf("item id %q added twice", o.id)
		}
	}
	c.items = append(c.items, &respItemState{id: it.Get("id").Str, typ: it.Get("type").Str, parts: map[int]*bytes.Buffer{}, lps: map[int][]any{}, notes: map[int][]any{}})
	return nil
}

// item returns the open item an event names.
func (c *respChecker) item(ev gjson.Result) (*respItemState, error) {
	i := int(ev.Get("output_index").Int())
	if !ev.Get("output_index").Exists() || i < 0 || i >= len(c.items) {
		return nil, fmt.Errorf("%s for output_index %s that was never added", ev.Get("type").Str, ev.Get("output_index").Raw)
	}
	it := c.items[i]
	if id := ev.Get("item_id"); id.Exists() && id.Str != it.id {
		return nil, fmt.Errorf("%s: item_id %q, but output %d is %q", ev.Get("type").Str, id.Str, i, it.id)
	}
	if it.done {
		return nil, fmt.Errorf("%s after output %d was done", ev.Get("type").Str, i)
	}
	return it, nil
}

// doneKeys names the member holding the whole text of each *.done event.
var doneKeys = map[string]string{"response.output_text.done": "text", "response.refusal.done": "refusal", "response.reasoning_text.done": "text"}

// itemEvent checks an event about an item already added.
func (c *respChecker) itemEvent(typ string, ev gjson.Result) error {
	if !ev.Get("output_index").Exists() {
		return nil
	}
	it, err := c.item(ev)
	if err != nil {
		return err
	}
	ci := int(ev.Get("content_index").Int())
	switch typ {
	case "response.content_part.added":
		if it.parts[ci] != nil {
			return fmt.Errorf("content part %d of %q added twice", ci, it.id)
		}
		it.parts[ci] = &bytes.Buffer{}
	case "response.output_text.delta", "response.refusal.delta", "response.reasoning_text.delta":
		if it.parts[ci] == nil {
			return fmt.Errorf("%s for content part %d of %q that was never added", typ, ci, it.id)
		}
		it.parts[ci].WriteString(ev.Get("delta").Str)
		if typ == "response.output_text.delta" {
			it.lps[ci] = append(it.lps[ci], jsonList(ev.Get("logprobs"))...)
		}
	case "response.output_text.done", "response.refusal.done", "response.reasoning_text.done":
		if p := it.parts[ci]; p == nil || p.String() != ev.Get(doneKeys[typ]).Str {
			return fmt.Errorf("%s of %q: done text differs from its deltas", typ, it.id)
		}
		if typ == "response.output_text.done" && !sameList(ev.Get("logprobs"), it.lps[ci]) {
			return fmt.Errorf("%s of %q: logprobs %s differ from those of its deltas", typ, it.id, clip([]byte(ev.Get("logprobs").Raw)))
		}
	case "response.output_text.annotation.added":
		if it.parts[ci] == nil {
			return fmt.Errorf("%s for content part %d of %q that was never added", typ, ci, it.id)
		}
		if n := ev.Get("annotation_index").Int(); n != int64(len(it.notes[ci])) {
			return fmt.Errorf("%s of %q: annotation_index %d; next is %d", typ, it.id, n, len(it.notes[ci]))
		}
		it.notes[ci] = append(it.notes[ci], jsonList(gjson.Parse("["+ev.Get("annotation").Raw+"]"))...)
	case "response.content_part.done":
		if p := ev.Get("part"); p.Get("type").Str == "output_text" && !sameList(p.Get("annotations"), it.notes[ci]) {
			return fmt.Errorf("%s of %q: annotations %s differ from those added", typ, it.id, clip([]byte(p.Get("annotations").Raw)))
		}
	case "response.function_call_arguments.delta", "response.mcp_call_arguments.delta":
		it.args.WriteString(ev.Get("delta").Str)
	case "response.function_call_arguments.done", "response.mcp_call_arguments.done":
		if it.args.String() != ev.Get("arguments").Str {
			return fmt.Errorf("%s of %q: arguments differ from their deltas", typ, it.id)
		}
	case "response.output_item.done":
		it.done, it.final = true, ev.Get("item")
	}
	return nil
}

// checkFinal checks the terminal response against the items streamed.
func checkFinal(typ string, r gjson.Result, items []*respItemState) error {
	out := r.Get("output").Array()
	if typ != "response.failed" {
		if len(out) != len(items) {
			return fmt.Errorf("%s lists %d output items; %d were streamed", typ, len(out), len(items))
		}
		for i, it := range items {
			if !it.done {
				return fmt.Errorf("%s before output %d (%q) was done", typ, i, it.id)
			}
		}
	}
	for i, o := range out {
		if i >= len(items) || o.Get("id").Str != items[i].id {
			return fmt.Errorf("%s: output %d has id %q, not the streamed one", typ, i, o.Get("id").Str)
		}
		it := items[i]
		switch it.typ {
		case "message", "reasoning":
			for ci, p := range it.parts {
				c := o.Get(fmt.Sprintf("content.%d", ci))
				got := c.Get("text").Str
				if c.Get("type").Str == "refusal" {
					got = c.Get("refusal").Str
				}
				if got != p.String() {
					return fmt.Errorf("%s: output %d content %d is %q; the deltas said %q", typ, i, ci, clip([]byte(got)), clip(p.Bytes()))
				}
				if c.Get("type").Str == "output_text" && !sameList(c.Get("logprobs"), it.lps[ci]) {
					return fmt.Errorf("%s: output %d content %d has logprobs %s; the deltas had others", typ, i, ci, clip([]byte(c.Get("logprobs").Raw)))
				}
				if c.Get("type").Str == "output_text" && !sameList(c.Get("annotations"), it.notes[ci]) {
					return fmt.Errorf("%s: output %d content %d has annotations %s; the stream added others", typ, i, ci, clip([]byte(c.Get("annotations").Raw)))
				}
			}
		case "function_call", "mcp_call":
			if o.Get("arguments").Str != it.args.String() {
				return fmt.Errorf("%s: output %d arguments differ from the deltas", typ, i)
			}
		}
		if it.done && !sameJSON(o, it.final) {
			return fmt.Errorf("%s: output %d is %s; its output_item.done said %s", typ, i, clip([]byte(o.Raw)), clip([]byte(it.final.Raw)))
		}
	}
	return nil
}

// sameJSON reports whether a and b are the same JSON value, whatever the
// order of their members.
func sameJSON(a, b gjson.Result) bool {
	var x, y any
	if json.Unmarshal([]byte(a.Raw), &x) != nil || json.Unmarshal([]byte(b.Raw), &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// jsonList returns the members of the JSON array a, decoded; none when a
// is not an array.
func jsonList(a gjson.Result) []any {
	var list []any
	if !a.IsArray() || json.Unmarshal([]byte(a.Raw), &list) != nil {
		return nil
	}
	return list
}

// sameList reports whether a is the JSON array of the members list. An
// absent a is not compared: the schema requires it where it must be.
func sameList(a gjson.Result, list []any) bool {
	if !a.Exists() {
		return true
	}
	got := jsonList(a)
	if !a.IsArray() || len(got) != len(list) {
		return false
	}
	return len(list) == 0 || reflect.DeepEqual(got, list)
}

// typedEvent is one SSE event with its event line.
type typedEvent struct {
	name string
	data []byte
}

// splitTypedEvents parses a Responses stream: each event is an "event:"
// line then one "data:" line; ":" comments are allowed; a trailing
// "data: [DONE]" is tolerated.
func splitTypedEvents(raw []byte) ([]typedEvent, error) {
	var evs []typedEvent
	var cur typedEvent
	for line := range bytes.Lines(raw) {
		if !bytes.HasSuffix(line, []byte("\n")) {
			return nil, fmt.Errorf("last line %q does not end with \\n", clip(line))
		}
		line = line[:len(line)-1]
		switch {
		case len(line) == 0:
			if cur.data != nil {
				evs = append(evs, cur)
			} else if cur.name != "" {
				return nil, fmt.Errorf("event %q without data", cur.name)
			}
			cur = typedEvent{}
		case line[0] == ':':
		case bytes.HasPrefix(line, []byte("event: ")):
			cur.name = string(line[len("event: "):])
		case bytes.HasPrefix(line, []byte("data: ")):
			if cur.data != nil {
				return nil, fmt.Errorf("second data line in one event")
			}
			d := line[len("data: "):]
			if string(d) == "[DONE]" {
				continue
			}
			if cur.name == "" {
				return nil, fmt.Errorf("data line without an event line: %s", clip(d))
			}
			cur.data = d
		default:
			return nil, fmt.Errorf("line %q not allowed", clip(line))
		}
	}
	if cur.data != nil {
		return nil, fmt.Errorf("last event is not terminated by a blank line")
	}
	return evs, nil
}
