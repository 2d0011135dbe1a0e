package wire

import "github.com/llmgw/gateway/jsonstring"

// ChatJSON accumulates a response's events into one chat.completion, which
// Encode appends at End: the message's content (a string once a content
// event came, even an empty one, unless tool calls follow an empty text;
// null otherwise), refusal, the tool calls in header order, the logprobs
// of the Text events joined (Logprobs; null when none came), the finish
// reason, usage when a Usage event came, system_fingerprint, service_tier
// and x_gateway when set. The zero value is not usable: see NewChatJSON. Not safe for
// concurrent use.
type ChatJSON struct {
	h          Header
	content    []byte
	hasContent bool
	refusal    []byte
	reasoning  []jsonText // reasoning_content, reasoning: kept as the stream forwards them
	extra      []byte     // the message's other members (Extra)
	top        []byte     // the response's other top-level members (Finish's Raw)
	calls      []jsonCall
	logprobs   Logprobs
	finish     string
	usage      []byte
	trace      []byte
	ended      bool
}

type jsonText struct {
	key  string
	text []byte
}

type jsonCall struct {
	id, name string
	args     []byte
}

// NewChatJSON returns the accumulator of the response h describes
// (h.IncludeUsage does not matter: usage is written whenever it came).
func NewChatJSON(h Header) *ChatJSON { return &ChatJSON{h: h} }

// Encode records e; at End it appends the chat.completion to dst.
func (j *ChatJSON) Encode(dst []byte, e *Event) []byte {
	if j.ended {
		return dst
	}
	switch e.Kind {
	case Text:
		j.logprobs.Add(e.Logprobs)
		switch e.Key {
		case "content":
			j.content = append(j.content, e.Text...)
			j.hasContent = true
		case "refusal":
			j.refusal = append(j.refusal, e.Text...)
		case "reasoning_content", "reasoning":
			i := 0
			for i < len(j.reasoning) && j.reasoning[i].key != e.Key {
				i++
			}
			if i == len(j.reasoning) {
				j.reasoning = append(j.reasoning, jsonText{key: e.Key})
			}
			j.reasoning[i].text = append(j.reasoning[i].text, e.Text...)
		}
	case CallHeader:
		j.calls = append(j.calls, jsonCall{id: e.ID, name: e.Name})
	case CallArgs:
		if n := len(j.calls); n > 0 {
			j.calls[n-1].args = append(j.calls[n-1].args, e.Text...)
		}
	case Extra:
		j.extra = append(j.extra[:0], e.Raw...)
	case Finish:
		if j.finish == "" {
			j.finish = e.Finish
			j.trace = append(j.trace[:0], e.Trace...)
			j.top = append(j.top[:0], e.Raw...)
		}
	case Usage:
		j.usage = append(j.usage[:0], e.Raw...)
		if len(e.Trace) > 0 {
			j.trace = append(j.trace[:0], e.Trace...)
		}
	case End:
		j.ended = true
		return j.appendCompletion(dst)
	}
	return dst
}

func (j *ChatJSON) appendCompletion(out []byte) []byte {
	out = AppendHead(out, "chat.completion", j.h)
	out = append(out, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	if j.hasContent && (len(j.content) > 0 || len(j.calls) == 0) {
		out = appendString(out, j.content)
	} else {
		out = append(out, "null"...)
	}
	out = append(out, `,"refusal":`...)
	if len(j.refusal) > 0 {
		out = appendString(out, j.refusal)
	} else {
		out = append(out, "null"...)
	}
	for _, r := range j.reasoning {
		out = append(out, ',')
		out = jsonstring.Append(out, r.key)
		out = append(out, ':')
		out = appendString(out, r.text)
	}
	if len(j.extra) > 0 {
		out = append(out, ',')
		out = append(out, j.extra...)
	}
	if len(j.calls) > 0 {
		out = append(out, `,"tool_calls":[`...)
		for i, c := range j.calls {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, `{"id":`...)
			out = jsonstring.Append(out, c.id)
			out = append(out, `,"type":"function","function":{"name":`...)
			out = jsonstring.Append(out, c.name)
			out = append(out, `,"arguments":`...)
			out = appendString(out, c.args)
			out = append(out, "}}"...)
		}
		out = append(out, ']')
	}
	out = append(out, `},"logprobs":`...)
	out = j.logprobs.AppendJSON(out)
	out = append(out, `,"finish_reason":`...)
	finish := j.finish
	if finish == "" {
		finish = "stop" // as ChatSSE ends a choice whose finish is unknown
	}
	out = jsonstring.Append(out, finish)
	out = append(out, "}]"...)
	if len(j.usage) > 0 {
		out = append(out, `,"usage":`...)
		out = append(out, j.usage...)
	}
	out = AppendFingerprint(out, j.h.Fingerprint)
	out = AppendServiceTier(out, j.h.ServiceTier)
	if len(j.top) > 0 {
		out = append(out, ',')
		out = append(out, j.top...)
	}
	out = appendTrace(out, j.trace)
	return append(out, '}')
}
