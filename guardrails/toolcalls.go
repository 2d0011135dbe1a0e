package guardrails

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
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
// them) and sends each whole, arguments and all, in one chunk.

// argGuards are the guards of guards that judge a tool call's arguments.
func argGuards(guards []*guard) []*guard {
	var out []*guard
	for _, g := range guards {
		if g.kind != "max_length" {
			out = append(out, g)
		}
	}
	return out
}

// judgeArgs returns args as ck's judgement rewrites them; a block, or a
// redaction that breaks their JSON, is an error.
func judgeArgs(ck *checker, args []byte) ([]byte, error) {
	out, err := ck.Check(args)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(out, args) && jsonvalid.Bytes(args) && !jsonvalid.Bytes(out) {
		return nil, brokenAnswerArguments()
	}
	return out, nil
}

// brokenAnswerArguments is the error of a redaction that would leave the
// arguments of a tool call of the answer invalid JSON.
func brokenAnswerArguments() error {
	return pipeline.Invalid(http.StatusBadRequest, pipeline.CodeContentBlocked,
		"a guardrail's redaction of a tool call's arguments would break their JSON; the answer was withheld")
}

// heldCall is a client tool call a stream holds: the chunk and the entry
// of its first delta, and its arguments so far.
type heldCall struct {
	index int64
	head  []byte // the chunk of its first delta (owned)
	entry string // its first tool_calls entry (owned)
	args  []byte
}

// holdCalls holds the tool_calls entries of chunk (ch its choice, i its
// index) and returns the chunk without them.
func (s *stream) holdCalls(chunk []byte, ch gjson.Result, i int) ([]byte, error) {
	ch.Get("delta.tool_calls").ForEach(func(_, e gjson.Result) bool {
		idx := e.Get("index").Int()
		frag := e.Get("function.arguments").Str
		for k := range s.calls[i] {
			if c := &s.calls[i][k]; c.index == idx {
				c.args = append(c.args, frag...)
				return true
			}
		}
		s.calls[i] = append(s.calls[i], heldCall{index: idx, head: append([]byte(nil), chunk...),
			entry: strings.Clone(e.Raw), args: []byte(frag)})
		return true
	})
	return sjson.DeleteBytes(chunk, "choices.0.delta.tool_calls")
}

// releaseCalls judges choice i's held calls and queues each, whole, in a
// chunk of its own.
func (s *stream) releaseCalls(i int) error {
	calls := s.calls[i]
	s.calls[i] = nil
	for _, c := range calls {
		args, err := judgeArgs(newChecker(s.ctx, s.args, s.meta), c.args)
		if err != nil {
			return asClientError(err)
		}
		entry, err := sjson.SetRawBytes([]byte(c.entry), "function.arguments", jsonstring.Append(nil, string(args)))
		if err != nil {
			return err
		}
		delta := append(append([]byte(`{"tool_calls":[`), entry...), "]}"...)
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
