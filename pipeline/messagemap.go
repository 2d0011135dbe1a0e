package pipeline

import "strconv"

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
	Prepended int
	// Client is how many of the upstream's messages, after the prepended
	// ones, are the client's, when the gateway added others after them (a
	// tool loop's history); 0 when none were added.
	Client int
	// Rewritten is set when the gateway changed the array in a way no
	// offset describes (context editing dropped or summarised messages,
	// prompted tool calling merged tool results): an index then names no
	// client message with certainty.
	Rewritten bool
}

// Prepend records n messages put in front of the array.
func (m *MessageMap) Prepend(n int) { m.Prepended += n }

// Rewrite records a change no offset describes.
func (m *MessageMap) Rewrite() { m.Rewritten = true }

// Append records that messages were added after the first client ones of
// the array, which holds the client's messages when nothing else was added.
func (m *MessageMap) Append(client int) {
	if m.Client == 0 {
		m.Client = client
	}
}

// ClientParam returns an upstream error's param as the client should see
// it. A param that names a message of the upstream's array by index
// (messages.[3].content, messages[3].content, messages.3.content) names the
// client's message instead; when the message is one the gateway added, or
// the array was rewritten, the index and what follows it are dropped
// ("messages"), since a wrong index misleads more than none. Any other
// param is returned as it is.
func (m MessageMap) ClientParam(param string) string {
	const key = "messages"
	if m == (MessageMap{}) || len(param) <= len(key) || param[:len(key)] != key {
		return param
	}
	rest := param[len(key):]
	open, bracket := 0, false
	switch {
	case len(rest) > 1 && rest[0] == '.' && rest[1] == '[':
		open, bracket = 2, true
	case rest[0] == '[':
		open, bracket = 1, true
	case rest[0] == '.':
		open = 1
	default:
		return param // messagesX: another name
	}
	end := open
	for end < len(rest) && end-open < 9 && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	if end == open || (end < len(rest) && rest[end] >= '0' && rest[end] <= '9') {
		return param // no index, or one too long to be an array's
	}
	after := end
	if bracket {
		if end == len(rest) || rest[end] != ']' {
			return param
		}
		after++
	} else if after < len(rest) && rest[after] != '.' && rest[after] != '[' {
		return param // messages.3x: not an index
	}
	n, _ := strconv.Atoi(rest[open:end])
	i := n - m.Prepended
	if m.Rewritten || i < 0 || (m.Client > 0 && i >= m.Client) {
		return key
	}
	if i == n {
		return param
	}
	return param[:len(key)+open] + strconv.Itoa(i) + rest[end:]
}
