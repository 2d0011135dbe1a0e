package guardrails

import (
	"net/http"
	"slices"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
)

// The tool calls an answer hands the client (tool_calls[].function.arguments)
// are the model's words as much as its content: the response stage judges
// each call's arguments as a text of its own, with the guards of every kind
// but max_length (a limit on the answer's text; a cut would leave the JSON
// broken). The arguments are judged as their JSON text, as the request and
// tool stages judge them; a redaction that leaves arguments that were valid
// JSON invalid withholds the answer instead (400 content_blocked, or the
// error event of a stream). A stream holds a choice's calls until the
// choice ends (or a server call is reported, after the round that had
// them) and sends each whole, arguments and all, in one chunk. The
// deprecated function_call is held and judged the same way, a custom
// tool's input as a text (not JSON). Arguments that are not a string are
// judged as their JSON text (argsText). The decoded text of the arguments'
// escaped strings is judged too, and what is held is bounded
// (arguments.go).

// argGuards are the guards of guards that judge a tool call's arguments.
func argGuards(guards []*guard) []*guard {
	return slices.DeleteFunc(slices.Clone(guards), func(g *guard) bool { return g.kind == "max_length" })
}

// judgeArgs returns args as ck's judgement rewrites them; a block, or a
// redaction that breaks their JSON, is an error.
func judgeArgs(ck *checker, args []byte) ([]byte, error) {
	out, err := ck.Check(args)
	if err != nil {
		return nil, err
	}
	out, valid, err := judgeJSON(ck, args, out) // arguments.go
	if err == nil && !valid {
		err = brokenAnswerArguments()
	}
	return out, err
}

// brokenAnswerArguments is the error of a redaction that would leave the
// arguments of a tool call of the answer invalid JSON.
func brokenAnswerArguments() error {
	return pipeline.Invalid(http.StatusBadRequest, pipeline.CodeContentBlocked,
		"a guardrail's redaction of a tool call's arguments would break their JSON; the answer was withheld")
}

// heldCall is a client tool call a stream holds: the chunk and the entry
// of its first delta, and its arguments so far. A legacy function_call
// (index -1) and a custom tool's input are held the same way.
type heldCall struct {
	index int64
	id    string // its id, when its first delta had one
	kind  callKind
	head  []byte // the chunk of its first delta (owned)
	entry string // its first tool_calls entry, or function_call object (owned)
	args  []byte
}

// callKind is what a held call's arguments are.
type callKind uint8

const (
	callFunction callKind = iota // a tool call's function.arguments
	callCustom                   // a custom tool call's custom.input: free text
	callLegacy                   // the deprecated delta.function_call's arguments
)

// argsPath is where a call of kind k keeps its arguments, in its entry.
func (k callKind) argsPath() string {
	switch k {
	case callCustom:
		return "custom.input"
	case callLegacy:
		return "arguments"
	}
	return "function.arguments"
}

// judgeCall judges the arguments of a call of kind k: a custom tool's
// input is a text of its own, the others JSON texts (judgeArgs).
func judgeCall(ck *checker, k callKind, args []byte) ([]byte, error) {
	if k == callCustom {
		return ck.Check(args)
	}
	return judgeArgs(ck, args)
}

// argsText is the text of a call's arguments v as they are judged: a
// string's value, or, for arguments that are not a string (some servers
// send an object), their JSON text, which is judged and goes out as a
// string, in a stream and in a JSON answer alike. Null or missing
// arguments are "".
func argsText(v gjson.Result) string {
	switch v.Type {
	case gjson.String:
		return v.Str
	case gjson.Null:
		return ""
	}
	return v.Raw
}

// carriesCalls reports whether choice ch's delta carries a tool call: a
// tool_calls array with an object in it, or a function_call object. Some
// OpenAI-compatible servers send "tool_calls":null, "function_call":null
// or "tool_calls":[] on every delta; those are no calls, and a chunk with
// one is text like any other (a call ends the text before it).
func carriesCalls(ch gjson.Result) bool {
	if fc := ch.Get("delta.function_call"); fc.IsObject() {
		return true
	}
	tc := ch.Get("delta.tool_calls")
	if !tc.IsArray() {
		return false
	}
	found := false
	tc.ForEach(func(_, e gjson.Result) bool {
		found = e.IsObject()
		return !found
	})
	return found
}

// holdCalls holds the tool_calls entries and the function_call of chunk
// (ch its choice, i its index) and returns the chunk without them. Past
// maxHeldArgs the answer is withheld.
func (s *stream) holdCalls(chunk []byte, ch gjson.Result, i int) ([]byte, error) {
	hold := func(idx int64, e gjson.Result, k callKind) {
		id := e.Get("id").Str
		for n := len(s.calls[i]) - 1; n >= 0; n-- {
			// A new id at an index in use is a new call: some upstreams
			// send every parallel call at index 0, each with its own id.
			if c := &s.calls[i][n]; c.index == idx && (id == "" || c.id == "" || id == c.id) {
				frag := argsText(e.Get(c.kind.argsPath()))
				c.args = append(c.args, frag...)
				s.argBytes += len(frag)
				return
			}
		}
		frag := argsText(e.Get(k.argsPath()))
		s.argBytes += len(frag)
		s.nCalls++
		entry := e.Raw
		if frag != "" { // held in args: not twice
			if ent, err := sjson.Set(entry, k.argsPath(), ""); err == nil {
				entry = ent
			}
		}
		// The head keeps the chunk's envelope only: its delta and logprobs
		// are replaced when the call goes out, and held they would be
		// memory no bound counts.
		head, err := sjson.SetRawBytes(chunk, "choices.0.delta", []byte("{}"))
		if err == nil && ch.Get("logprobs").Exists() {
			head, err = sjson.SetRawBytes(head, "choices.0.logprobs", []byte("null"))
		}
		if err != nil {
			head = append([]byte(nil), chunk...)
		}
		s.metaBytes += len(head) + len(entry)
		s.calls[i] = append(s.calls[i], heldCall{index: idx, id: id, kind: k, head: head,
			entry: strings.Clone(entry), args: []byte(frag)})
	}
	if tc := ch.Get("delta.tool_calls"); tc.IsArray() {
		tc.ForEach(func(_, e gjson.Result) bool {
			if !e.IsObject() {
				return true
			}
			k := callFunction
			if e.Get("custom").Exists() {
				k = callCustom
			}
			hold(e.Get("index").Int(), e, k)
			return true
		})
	}
	if fc := ch.Get("delta.function_call"); fc.IsObject() {
		hold(-1, fc, callLegacy)
	}
	if s.argBytes > maxHeldArgs || s.nCalls > maxHeldCalls || s.metaBytes > maxHeldArgs {
		return nil, tooLongArguments()
	}
	out, err := sjson.DeleteBytes(chunk, "choices.0.delta.tool_calls")
	if err == nil && ch.Get("delta.function_call").Exists() {
		out, err = sjson.DeleteBytes(out, "choices.0.delta.function_call")
	}
	// The logprobs of a chunk of calls are the calls' tokens (their
	// arguments as the model wrote them, before any redaction): left on
	// the chunk, they would be taken for the tokens of its text and go out
	// with it. A text the chunk has (not "") keeps its list.
	for k := range textKeys {
		if err != nil {
			break
		}
		if t := ch.Get(textPaths[k].delta); t.Type == gjson.String && t.Str != "" {
			continue
		}
		if textPaths[k].logprobs != "" && ch.Get(textPaths[k].logprobs).Exists() {
			out, err = sjson.SetRawBytes(out, textPaths[k].chunkLogprobs, []byte("null"))
		}
	}
	return out, err
}

// releaseCalls judges choice i's held calls and queues each, whole, in a
// chunk of its own.
func (s *stream) releaseCalls(i int) error {
	calls := s.calls[i]
	s.calls[i] = nil
	for _, c := range calls {
		s.metaBytes -= len(c.head) + len(c.entry)
		args, err := judgeCall(newChecker(s.ctx, s.args, s.meta), c.kind, c.args)
		if err != nil {
			return asClientError(err)
		}
		entry, err := sjson.SetRawBytes([]byte(c.entry), c.kind.argsPath(), jsonstring.Append(nil, string(args)))
		if err != nil {
			return err
		}
		var delta []byte
		if c.kind == callLegacy {
			delta = append(append([]byte(`{"function_call":`), entry...), '}')
		} else {
			// Numbered in the order they go out: dense, and apart when
			// the upstream sent several at one index.
			if entry, err = sjson.SetBytes(entry, "index", int64(s.shown[i])); err != nil {
				return err
			}
			s.shown[i]++
			delta = append(append([]byte(`{"tool_calls":[`), entry...), "]}"...)
		}
		out, err := sjson.SetRawBytes(c.head, "choices.0.delta", delta)
		if err == nil {
			out, err = sjson.SetRawBytes(out, "choices.0.finish_reason", []byte("null"))
		}
		if err == nil && gjson.GetBytes(out, "choices.0.logprobs").Exists() {
			out, err = sjson.SetRawBytes(out, "choices.0.logprobs", []byte("null")) // the text's went with it
		}
		if err != nil {
			return err
		}
		s.queue = append(s.queue, out)
	}
	return nil
}
