package caching

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
)

// serverCallsKey is the member of a stored completion that lists the server
// tools the tool loop ran to produce it, for a hit whose request hears them
// (pipeline.Request.OnServerCall: the Responses API shows each as an
// mcp_call item where the live answer had it). A chat client never sees
// the member: renderJSON drops it and a replay reads only the answer.
const serverCallsKey = "x_gateway_server_calls"

// storedCall is one server call of a stored answer: what the request heard,
// and where in the answer it ran (the texts produced before it, and whether
// the answer's client calls had been handed out).
type storedCall struct {
	name, source   string
	args, output   []byte
	isError, after bool
	volatile       bool // the tool is not Repeatable: the answer is not stored
	at             pipeline.TextsAt
}

// callLog records the server calls a miss's tool loop runs. For a stream
// the loop reports a call from within Next, before the chunk that follows
// it, so the recorder's answer so far is where the call ran; a JSON loop
// says where (ServerCall.At). Used by the goroutine that drives the loop.
type callLog struct {
	calls []storedCall
	rec   *recorder // a stream's recorder; nil for JSON
}

// hear is the request's OnServerCall while the miss runs; next is the one
// the request had (nil for none).
func (l *callLog) hear(c *pipeline.ServerCall, next func(*pipeline.ServerCall)) {
	sc := storedCall{name: c.Name, source: c.Source, args: bytes.Clone(c.Arguments), output: bytes.Clone(c.Output),
		isError: c.IsError, after: c.AfterClientCalls, volatile: !c.Repeatable}
	switch {
	case c.At != nil:
		sc.at = *c.At
	case l.rec != nil:
		sc.at = pipeline.TextsAt{Content: len(l.rec.content), Refusal: len(l.rec.refusal),
			ReasoningContent: len(l.rec.reasoning[0]), Reasoning: len(l.rec.reasoning[1])}
		sc.after = len(l.rec.calls) > 0
	}
	l.calls = append(l.calls, sc)
	if next != nil {
		next(c)
	}
}

// listen makes r's server calls heard by a new callLog as well, for the
// answer the miss stores.
func listen(r *pipeline.Request) *callLog {
	l := &callLog{}
	next := r.OnServerCall
	r.OnServerCall = func(c *pipeline.ServerCall) { l.hear(c, next) }
	return l
}

// add returns completion with the calls l heard as its serverCallsKey
// member: completion itself when l is nil or heard none.
func (l *callLog) add(completion []byte) []byte {
	if l == nil {
		return completion
	}
	return withCalls(completion, l.calls)
}

// withCalls returns completion with calls as its serverCallsKey member:
// completion itself when there are none, or when it is not an object.
func withCalls(completion []byte, calls []storedCall) []byte {
	body := bytes.TrimRight(completion, " \t\r\n")
	if len(calls) == 0 || len(body) < 2 || body[len(body)-1] != '}' {
		return completion
	}
	out := make([]byte, 0, len(body)+256)
	out = append(out, body[:len(body)-1]...)
	if len(bytes.TrimSpace(body[1:len(body)-1])) > 0 {
		out = append(out, ',')
	}
	out = append(out, `"`+serverCallsKey+`":[`...)
	for i, c := range calls {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"name":`...)
		out = jsonstring.Append(out, c.name)
		out = append(out, `,"source":`...)
		out = jsonstring.Append(out, c.source)
		out = append(out, `,"arguments":`...)
		out = jsonstring.Append(out, string(c.args))
		out = append(out, `,"output":`...)
		out = jsonstring.Append(out, string(c.output))
		out = append(out, `,"error":`...)
		out = strconv.AppendBool(out, c.isError)
		out = append(out, `,"after":`...)
		out = strconv.AppendBool(out, c.after)
		if c.volatile {
			out = append(out, `,"volatile":true`...)
		}
		out = append(out, `,"at":[`...)
		for j, n := range []int{c.at.Content, c.at.Refusal, c.at.ReasoningContent, c.at.Reasoning} {
			if j > 0 {
				out = append(out, ',')
			}
			out = strconv.AppendInt(out, int64(n), 10)
		}
		out = append(out, "]}"...)
	}
	return append(out, "]}"...)
}

// storedCalls reads the server calls of a stored completion (nil for none).
// Their slices are views of completion.
func storedCalls(completion []byte) []storedCall {
	v := gjson.GetBytes(completion, serverCallsKey)
	if !v.IsArray() {
		return nil
	}
	var calls []storedCall
	v.ForEach(func(_, c gjson.Result) bool {
		at := c.Get("at").Array()
		n := func(i int) int {
			if i < len(at) {
				return max(0, int(at[i].Int()))
			}
			return 0
		}
		calls = append(calls, storedCall{name: c.Get("name").Str, source: c.Get("source").Str,
			args: []byte(c.Get("arguments").Str), output: []byte(c.Get("output").Str),
			isError: c.Get("error").Bool(), after: c.Get("after").Bool(),
			at: pipeline.TextsAt{Content: n(0), Refusal: n(1), ReasoningContent: n(2), Reasoning: n(3)}})
		return true
	})
	return calls
}

// tell reports c to hear as the loop reported it.
func (c *storedCall) tell(hear func(*pipeline.ServerCall)) {
	at := c.at
	hear(&pipeline.ServerCall{Name: c.name, Source: c.source, Arguments: c.args, Output: c.output,
		IsError: c.isError, At: &at, AfterClientCalls: c.after, Repeatable: true})
}
