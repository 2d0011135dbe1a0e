package caching

import (
	"io"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// maxRecorded bounds the text a recorder assembles; a longer answer is
// passed through and not cached.
const maxRecorded = 4 << 20

// recorder assembles a chat.completion from the chunks of a stream, on the
// side: it copies what it needs and never holds a chunk. Used by one
// goroutine at a time.
type recorder struct {
	started     bool
	bad         bool // something we cannot replay faithfully: do not store
	size        int
	id, model   string
	created     int64
	fingerprint string
	tier        string
	reasoning   [2][]byte // reasoning_content, reasoning: by reasoningKeys
	content     []byte
	hasContent  bool
	refusal     []byte
	calls       []recordedCall
	finish      string
	usage       []byte
	todos       []byte       // x_gateway.todos of the last chunk that had them
	top         wire.Members // the stream's other top-level members (topMembers)
}

type recordedCall struct {
	id, typ, name string
	args          []byte
}

func (r *recorder) add(chunk []byte) {
	if r.bad || len(chunk) == 0 || chunk[0] == ':' {
		return
	}
	r.size += len(chunk)
	if r.size > maxRecorded || !jsonvalid.Bytes(chunk) {
		r.bad = true
		return
	}
	top := gjson.ParseBytes(chunk)
	if top.Get("error").Exists() {
		r.bad = true
		return
	}
	if !r.started {
		r.started = true
		r.id = top.Get("id").String()
		r.model = top.Get("model").String()
		r.created = top.Get("created").Int()
	}
	if fp := top.Get("system_fingerprint"); fp.Type == gjson.String {
		r.fingerprint = fp.Str
	}
	if st := top.Get("service_tier"); st.Type == gjson.String {
		r.tier = st.Str
	}
	top.Get("choices").ForEach(func(_, ch gjson.Result) bool {
		if ch.Get("index").Int() != 0 {
			r.bad = true // n > 1 is never cached
			return false
		}
		if lp := ch.Get("logprobs"); lp.Exists() && lp.Type != gjson.Null {
			r.bad = true
			return false
		}
		d := ch.Get("delta")
		if !replayableMembers(d) {
			r.bad = true
			return false
		}
		for i, k := range reasoningKeys {
			if v := d.Get(k); v.Type == gjson.String {
				r.reasoning[i] = append(r.reasoning[i], v.Str...)
			}
		}
		if c := d.Get("content"); c.Type == gjson.String {
			r.content = append(r.content, c.Str...)
			r.hasContent = true
		}
		if rf := d.Get("refusal"); rf.Type == gjson.String {
			r.refusal = append(r.refusal, rf.Str...)
		}
		calls := d.Get("tool_calls")
		if !calls.IsArray() {
			calls = gjson.Result{} // null: no call (ForEach would visit the null)
		}
		calls.ForEach(func(_, tc gjson.Result) bool {
			i := int(tc.Get("index").Int())
			if i < 0 || i > len(r.calls) || i >= 128 {
				r.bad = true
				return false
			}
			if i == len(r.calls) {
				r.calls = append(r.calls, recordedCall{})
			}
			c := &r.calls[i]
			if v := tc.Get("id").String(); v != "" {
				c.id = v
			}
			if v := tc.Get("type").String(); v != "" {
				c.typ = v
			}
			c.name += tc.Get("function.name").String()
			c.args = append(c.args, tc.Get("function.arguments").String()...)
			return true
		})
		if fr := wire.FinishReason(ch); fr != "" {
			r.finish = fr
		}
		return !r.bad
	})
	if u := top.Get("usage"); u.IsObject() {
		r.usage = append(r.usage[:0], u.Raw...)
	}
	if td := top.Get("x_gateway.todos"); td.IsArray() {
		r.todos = append(r.todos[:0], td.Raw...)
	}
	top.ForEach(func(k, v gjson.Result) bool {
		if !commonTop(k.Str) {
			r.top.Set(k.Str, v) // a provider's own, on every chunk or the last: the last value
		}
		return true
	})
}

// completion returns the assembled chat.completion (encoded by
// wire.ChatJSON), or nil when the stream held something that is not
// replayable.
func (r *recorder) completion() []byte {
	if r.bad || !r.started || r.finish == "" {
		return nil
	}
	for _, c := range r.calls {
		if c.typ != "function" {
			return nil // not a function call: never stored, never replayed
		}
	}
	j := wire.NewChatJSON(wire.Header{ID: r.id, Created: r.created, Model: r.model, Fingerprint: r.fingerprint, ServiceTier: r.tier})
	for i, k := range reasoningKeys {
		if len(r.reasoning[i]) > 0 {
			j.Encode(nil, &wire.Event{Kind: wire.Text, Key: k, Text: r.reasoning[i]})
		}
	}
	if r.hasContent {
		j.Encode(nil, &wire.Event{Kind: wire.Text, Key: "content", Text: r.content})
	}
	if len(r.refusal) > 0 {
		j.Encode(nil, &wire.Event{Kind: wire.Text, Key: "refusal", Text: r.refusal})
	}
	for _, c := range r.calls {
		j.Encode(nil, &wire.Event{Kind: wire.CallHeader, ID: c.id, Name: c.name})
		j.Encode(nil, &wire.Event{Kind: wire.CallArgs, Text: c.args})
	}
	var trace []byte
	if r.todos != nil {
		trace = append(append([]byte(`{"todos":`), r.todos...), '}')
	}
	var top []byte
	if r.top.Size() > 0 {
		top = r.top.AppendJSON(nil, 0)
	}
	j.Encode(nil, &wire.Event{Kind: wire.Finish, Finish: r.finish, Raw: top, Trace: trace})
	if len(r.usage) > 0 {
		j.Encode(nil, &wire.Event{Kind: wire.Usage, Raw: r.usage})
	}
	return j.Encode(make([]byte, 0, len(r.content)+len(r.usage)+256), &wire.Event{Kind: wire.End})
}

// replayableMembers reports whether message or delta m carries nothing a
// replay would lose: no member beyond the texts and calls an entry keeps
// that is a non-empty array or object (a search model's annotations,
// audio, a provider's own such as reasoning_details: wire.MessageMember).
// A replay in the other form would show the answer without them. Nulls,
// empty ones and scalars (a provider's per-chunk figures) do not count.
func replayableMembers(m gjson.Result) bool {
	ok := true
	m.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "role", "content", "refusal", "tool_calls", "reasoning_content", "reasoning":
			return true
		}
		ok = !wire.MessageMember(v)
		return ok
	})
	return ok
}

// reasoningKeys are the message members of the model's reasoning that an
// entry keeps beside the content, as the stream and the JSON answer show
// them.
var reasoningKeys = [...]string{"reasoning_content", "reasoning"}

// recordingStream passes every chunk of inner through the moment it arrives
// and feeds a copy of what matters to a recorder; at a clean end (io.EOF) it
// hands the assembled completion to done. A stream whose client did not ask
// for usage carries none, so the completion then takes the usage the meter
// noted for the request's calls (calls: the request's UsageLog), as a JSON
// answer would have it. Used by one goroutine at a time; Close may be
// called from any goroutine (it only closes inner).
type recordingStream struct {
	inner pipeline.Stream
	calls *pipeline.UsageLog
	rec   recorder
	done  func(completion []byte)
	ended bool
}

// Next returns inner's next chunk unchanged.
func (s *recordingStream) Next() ([]byte, error) {
	chunk, err := s.inner.Next()
	if err == nil {
		s.rec.add(chunk)
		return chunk, nil
	}
	if !s.ended {
		s.ended = true
		if err == io.EOF {
			s.finish()
		}
	}
	return chunk, err
}

// finish hands the completion of a stream that ended to done. A function
// of its own, so that its locals are not in Next's frame: Next is on the
// stack of every stream while it waits for the upstream, and a stream's
// goroutine keeps its stack, at its deepest, for as long as the stream
// lasts.
//
//go:noinline
func (s *recordingStream) finish() {
	if c, ok := s.calls.Total(); ok && len(s.rec.usage) == 0 {
		s.rec.usage = c.AppendJSON(nil)
	}
	if c := s.rec.completion(); c != nil {
		s.done(c)
	}
}

// Close closes inner.
func (s *recordingStream) Close() { s.inner.Close() }
