package pipeline

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// MessageMap says how the messages array the upstream receives relates to
// the client's, so that an upstream error naming a message (its "param",
// "messages.[3].content") can name the client's. The zero value: the
// upstream gets the client's messages as sent.
//
// A layer that changes the array records it on the request it passes on
// (Prepend, Rewrite); the upstream client copies the map into the errors it
// returns (UpstreamError.Messages).
type MessageMap struct {
	// Prepended is how many messages the gateway put in front of the
	// client's (a system message of its own).
	Prepended int32
	// Client is how many of the upstream's messages, after the prepended
	// ones, are the client's, when the gateway added others after them (a
	// tool loop's history); 0 when none were added.
	Client int32
	// Rewritten is set when the gateway changed the array in a way no
	// offset describes (context editing dropped or summarised messages,
	// prompted tool calling merged tool results): an index then names no
	// client message with certainty.
	Rewritten bool
	// Input is set when what became the messages is a Responses request's
	// input: an error that names a message names "input".
	Input bool
}

// Prepend records n messages put in front of the array.
func (m *MessageMap) Prepend(n int) { m.Prepended += int32(n) }

// Rewrite records a change no offset describes.
func (m *MessageMap) Rewrite() { m.Rewritten = true }

// Append records that messages were added after the first client ones of
// the array, which holds the client's messages when nothing else was added.
func (m *MessageMap) Append(client int) {
	if m.Client == 0 {
		m.Client = int32(min(client, math.MaxInt32))
	}
}

// ClientParam returns an upstream error's param as the client should see
// it. A param that names a message of the upstream's array by index
// (messages.[3].content, messages[3].content, messages.3.content) names the
// client's message instead; when the message is one the gateway added, or
// the array was rewritten, the index and what follows it are dropped
// ("messages", or "input" for a Responses request), since a wrong index
// misleads more than none. Any other param is returned as it is.
func (m MessageMap) ClientParam(param string) string {
	if m == (MessageMap{}) {
		return param
	}
	if m.Input {
		if p, ok := responsesParam(param); ok {
			return p
		}
	}
	if param == messagesKey {
		return m.name()
	}
	ref, n, ok := m.mapRef(param)
	switch {
	case !ok:
		return param
	case ref == m.name():
		return ref
	}
	return ref + param[n:]
}

// responsesParam names a chat request field by the Responses request
// field it was translated from: a refusal of the chat request the gateway
// built from a Responses request names what the client sent. ok is false
// for a param that is not a translated field. A tool's index is dropped:
// the chat tools are the client's function tools alone, so their indices
// need not be the client's.
func responsesParam(param string) (string, bool) {
	name, rest := param, ""
	if i := strings.IndexAny(param, ".["); i >= 0 {
		name, rest = param[:i], param[i:]
	}
	switch name {
	case "logprobs":
		return "include", true
	case "max_completion_tokens", "max_tokens":
		return "max_output_tokens", true
	case "reasoning_effort":
		return "reasoning.effort", true
	case "verbosity":
		return "text.verbosity", true
	case "tools", "functions":
		return "tools", true
	case "tool_choice", "function_call":
		return "tool_choice", true
	case "response_format":
		// response_format.json_schema.schema is text.format.schema.
		rest = strings.TrimPrefix(rest, ".json_schema")
		if rest != "" && rest[0] != '.' {
			rest = ""
		}
		return "text.format" + rest, true
	}
	return "", false
}

// ClientError returns err with its param and message naming what the
// client sent (ClientParam, ClientText) when it is a refusal of the
// request the gateway built (an *Error: a provider translation's), else
// err itself.
func (m MessageMap) ClientError(err error) error {
	var pe *Error
	if m == (MessageMap{}) || !errors.As(err, &pe) {
		return err
	}
	c := *pe
	c.Param, c.Message = m.ClientParam(pe.Param), m.ClientText(pe.Message)
	return &c
}

// ClientText returns an upstream error's message with each reference to a
// message by index mapped as ClientParam maps a param, so that the message
// and the param name the same one: providers quote the param in the text
// ("Invalid 'messages[3].content': ...").
func (m MessageMap) ClientText(text string) string {
	if m == (MessageMap{}) {
		return text
	}
	var b []byte
	from := 0 // text[from:] is not copied yet
	for i := 0; ; {
		j := strings.Index(text[i:], messagesKey)
		if j < 0 {
			break
		}
		at := i + j
		i = at + len(messagesKey)
		if at > 0 && isWordByte(text[at-1]) {
			continue // another word ending in messages
		}
		ref, n, ok := m.mapRef(text[at:])
		if !ok {
			continue
		}
		end := at + n
		if ref == m.name() {
			// The path under a message the client cannot see goes too.
			for end < len(text) && (isWordByte(text[end]) || text[end] == '.' || text[end] == '[' || text[end] == ']') {
				end++
			}
		}
		b = append(append(b, text[from:at]...), ref...)
		from, i = end, end
	}
	if b == nil {
		return text
	}
	return string(append(b, text[from:]...))
}

const messagesKey = "messages"

// name is the client's name for the array.
func (m MessageMap) name() string {
	if m.Input {
		return "input"
	}
	return messagesKey
}

// mapRef reads a reference to a message by index at the start of s
// ("messages" then .[N], [N] or .N, N at most 9 digits) and returns it as
// the client should see it (messages.[N-Prepended], or the client's name for
// the array alone) with the bytes of s it covers, through the index; ok is
// false when s does not start with one.
func (m MessageMap) mapRef(s string) (ref string, n int, ok bool) {
	if len(s) <= len(messagesKey) || s[:len(messagesKey)] != messagesKey {
		return "", 0, false
	}
	rest := s[len(messagesKey):]
	open, bracket := 0, false
	switch {
	case len(rest) > 1 && rest[0] == '.' && rest[1] == '[':
		open, bracket = 2, true
	case rest[0] == '[':
		open, bracket = 1, true
	case rest[0] == '.':
		open = 1
	default:
		return "", 0, false // messagesX: another name
	}
	end := open
	for end < len(rest) && end-open < 9 && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	if end == open || (end < len(rest) && rest[end] >= '0' && rest[end] <= '9') {
		return "", 0, false // no index, or one too long to be an array's
	}
	after := end
	if bracket {
		if end == len(rest) || rest[end] != ']' {
			return "", 0, false
		}
		after++
	} else if after < len(rest) && isWordByte(rest[after]) {
		return "", 0, false // messages.3x: not an index
	}
	idx, _ := strconv.Atoi(rest[open:end])
	i := idx - int(m.Prepended)
	if m.Rewritten || i < 0 || (m.Client > 0 && i >= int(m.Client)) {
		return m.name(), len(messagesKey) + after, true
	}
	return s[:len(messagesKey)+open] + strconv.Itoa(i) + rest[end:after], len(messagesKey) + after, true
}

func isWordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
