package caching

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"

	"github.com/tidwall/gjson"
)

// An entry is what the response cache stores: a 9-byte header (format
// version, then the expiry as big-endian unix milliseconds) followed by a
// chat.completion JSON document (the non-stream form, whatever form the
// answer was produced in). The expiry is checked against Options.Now, so
// every store honours the gateway's clock; the store's own TTL only frees
// memory.
const (
	entryVersion = 1
	entryHeader  = 9
)

// clockSkew is how far behind the clock of the replica that stored an
// entry another replica's may be: a fresh entry it reads is then due to
// live longer than the ttl by that much, and is not taken for one stored
// under a longer ttl.
const clockSkew = 5 * time.Second

func encodeEntry(completion []byte, expires time.Time) []byte {
	out := make([]byte, entryHeader, entryHeader+len(completion))
	out[0] = entryVersion
	binary.BigEndian.PutUint64(out[1:], uint64(expires.UnixMilli()))
	return append(out, completion...)
}

// decodeEntry returns the completion of an entry still fresh at now, and
// not due to live longer than ttl (and clockSkew) from now: one stored
// under a longer ttl (before a reload lowered it; Redis keeps it across
// the reload) is stale under the ttl configured now. The result aliases e.
func decodeEntry(e []byte, now time.Time, ttl time.Duration) ([]byte, bool) {
	if len(e) <= entryHeader || e[0] != entryVersion {
		return nil, false
	}
	exp := int64(binary.BigEndian.Uint64(e[1:entryHeader]))
	if now.UnixMilli() >= exp || exp-now.UnixMilli() > (ttl+clockSkew).Milliseconds() {
		return nil, false
	}
	return e[entryHeader:], true
}

// storable reports whether a chat.completion is a final answer worth
// keeping: one choice that stopped (or hit the length limit) with text, or,
// when toolCalls is set, a turn of client function calls. A turn that hands
// a call over for approval (an id the tool loop minted) is not: every pause
// mints its own id, and a replayed id would take the decision made on the
// pause it came from, whatever the client decides now. Nor is an answer
// made after a server call failed (its serverCallsKey member says so): the
// failure may be passing (a tool's service down for a moment), and the
// answer would repeat it for the whole TTL. Nor one a server tool took
// part in that is not marked idempotent (its call's volatile member): a
// hit would not run it, and its answer (the time, a message sent) would
// stand for a call that never happened.
func storable(completion []byte, toolCalls bool) bool {
	if !jsonvalid.Bytes(completion) {
		return false
	}
	res := gjson.GetManyBytes(completion, "choices.#", "choices.0.finish_reason",
		"choices.0.message.content", "choices.0.message.tool_calls", "error", "choices.0.logprobs",
		serverCallsKey+".#(error==true)", serverCallsKey+".#(volatile==true)")
	if res[0].Int() != 1 || res[4].Exists() || (res[5].Exists() && res[5].Type != gjson.Null) || res[6].Exists() || res[7].Exists() {
		return false
	}
	if !replayableMembers(gjson.GetBytes(completion, "choices.0.message")) {
		return false
	}
	calls := res[3]
	switch res[1].String() {
	case "stop", "length":
		// "tool_calls": null (SGLang, LiteLLM) or [] is no call; anything
		// else a replay could not show both ways.
		return res[2].Type == gjson.String && res[2].Str != "" &&
			(!calls.Exists() || calls.Type == gjson.Null || calls.IsArray() && len(calls.Array()) == 0)
	case "tool_calls":
		if !toolCalls || !calls.IsArray() || len(calls.Array()) == 0 {
			return false
		}
		ok := true
		calls.ForEach(func(_, c gjson.Result) bool {
			id := c.Get("id").String()
			ok = c.Get("type").String() == "function" && id != "" &&
				!strings.HasPrefix(id, pipeline.ApprovalIDPrefix) && c.Get("function.name").String() != ""
			return ok
		})
		return ok
	}
	return false
}

// newCompletionID returns a fresh chat completion id.
func newCompletionID() string {
	var b [33]byte
	copy(b[:], "chatcmpl-")
	x, y := rand.Uint64(), rand.Uint64()
	for i := range 12 {
		b[9+i] = hexDigits[x>>(i*4)&0xf]
		b[21+i] = hexDigits[y>>(i*4)&0xf]
	}
	return string(b[:])
}

// todosTrace returns the x_gateway object a hit of completion shows:
// {"todos":...} when the answer had a plan (write_todos), which the live
// answer shows with or without a trace; nil otherwise. The rest of the
// stored x_gateway traces the original run, not this one.
func todosTrace(completion []byte) []byte {
	td := gjson.GetBytes(completion, "x_gateway.todos")
	if !td.IsArray() {
		return nil
	}
	return append(append([]byte(`{"todos":`), td.Raw...), '}')
}

// topMembers returns completion's top-level members that a replayed stream
// carries on its finish chunk ("key":value,…), as the live stream of the
// tool loop does: a provider's own (citations, search results), not those
// every chunk has in its own form, the trace or the stored server calls.
func topMembers(completion []byte) []byte {
	var m wire.Members
	gjson.ParseBytes(completion).ForEach(func(k, v gjson.Result) bool {
		if !commonTop(k.Str) {
			m.Set(k.Str, v)
		}
		return true
	})
	if m.Size() == 0 {
		return nil
	}
	return m.AppendJSON(nil, 0)
}

// commonTop reports whether a completion's or chunk's top-level member
// named k is one the encoders write themselves (wire.OwnTop) or the entry
// keeps apart (the trace, the stored server calls).
func commonTop(k string) bool {
	return wire.OwnTop(k) || k == "x_gateway" || k == serverCallsKey
}

// renderJSON writes completion as the answer to a new request: a fresh id
// and created, the client's model name, every other member unchanged except
// x_gateway, of which only the plan is kept (todosTrace).
func renderJSON(completion []byte, id string, created int64, model string) []byte {
	out := make([]byte, 0, len(completion)+96)
	out = append(out, `{"id":`...)
	out = jsonstring.Append(out, id)
	out = append(out, `,"object":"chat.completion","created":`...)
	out = strconv.AppendInt(out, created, 10)
	out = append(out, `,"model":`...)
	out = jsonstring.Append(out, model)
	gjson.ParseBytes(completion).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id", "object", "created", "model", "x_gateway", serverCallsKey:
			return true
		}
		out = append(out, ',')
		out = append(out, k.Raw...)
		out = append(out, ':')
		out = append(out, v.Raw...)
		return true
	})
	if tr := todosTrace(completion); tr != nil {
		out = append(out, `,"x_gateway":`...)
		out = append(out, tr...)
	}
	return append(out, '}')
}
