package proxy

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
)

// surrogates moves a UTF-16 surrogate pair that an upstream split between
// two chunks back together. A server that cuts its text by UTF-16 units
// (JavaScript's string length) may end one chunk's string with the high
// half of a pair ("…\ud83d") and start the next chunk's with the low half
// ("\ude00…"); each chunk read alone decodes its half to U+FFFD, which is
// what every layer that reads the text (the tool loop's re-streamer, the
// Responses form, the guardrails) would show, where the JSON answer of the
// same request has the character. The high half is taken off the end of a
// text member (content, reasoning, refusal, arguments) of a chunk of one
// choice and put back in front of the low half that starts the same member
// of the same choice in the next chunk: each chunk leaves at once, and
// both are valid JSON throughout. A carried half the next chunk does not
// take was a lone half, which decodes to U+FFFD alone: it is dropped.
type surrogates struct {
	carry []carried // high halves taken off the last chunk's strings, in order
	hold  []carried // the halves this chunk carries (an array of its own: carry is read meanwhile)
	buf   []byte    // the rewritten chunk
}

// carried is a high half, the member it was taken from and its choice.
type carried struct {
	half   [6]byte
	key    string
	choice int64
}

var escU = []byte(`\u`)

// pairKeys are the members whose strings are text a stream sends in
// pieces.
var pairKeys = [...]string{"content", "refusal", "reasoning_content", "reasoning", "arguments", "text"}

// pair returns data with the halves carried from the last chunk put back
// and this chunk's trailing high halves taken off (a view of data when
// neither applies, else of s's buffer, valid until the next call).
func (s *surrogates) pair(data []byte) []byte {
	if len(s.carry) == 0 && !bytes.Contains(data, escU) {
		return data
	}
	out := s.buf[:0]
	last, changed := 0, false
	carry := s.carry
	s.hold = s.hold[:0]
	choice, known := int64(0), false
	for i := 0; ; {
		j := bytes.Index(data[i:], escU)
		if j < 0 {
			break
		}
		at := i + j
		i = at + 2
		if !jsonstring.Unescaped(data, at) || at+6 > len(data) {
			continue
		}
		v, ok := jsonstring.Hex4(data[at+2 : at+6])
		if !ok {
			continue
		}
		i = at + 6
		high := v >= 0xD800 && v <= 0xDBFF && at+6 < len(data) && data[at+6] == '"'
		low := v >= 0xDC00 && v <= 0xDFFF && len(carry) > 0 && at > 0 && data[at-1] == '"' && jsonstring.Unescaped(data, at-1)
		if !high && !low {
			continue
		}
		if !known {
			// Rare: parsed once per chunk that has a candidate.
			choice, known = onlyChoice(data)
			if !known {
				break // several choices, or none: nothing is moved
			}
		}
		switch key := memberOf(data, at); {
		case high && isPairKey(key):
			// A high half that ends a text member: carried to the next chunk.
			c := carried{key: key, choice: choice}
			copy(c.half[:], data[at:at+6])
			s.hold = append(s.hold, c)
			out = append(out, data[last:at]...)
			last, changed = at+6, true
		case low && carry[0].key == key && carry[0].choice == choice:
			// A low half that starts the same member: the carried high
			// half goes in front of it.
			out = append(out, data[last:at]...)
			out = append(out, carry[0].half[:]...)
			carry = carry[1:]
			last, changed = at, true
		}
	}
	s.carry = append(s.carry[:0], s.hold...) // carry is done with: its array takes the new halves
	if !changed {
		return data
	}
	s.buf = append(out, data[last:]...)
	return s.buf
}

// onlyChoice returns the index of a chunk's one choice; false when it has
// several or none.
func onlyChoice(data []byte) (int64, bool) {
	ch := gjson.GetBytes(data, "choices")
	if !ch.IsArray() {
		return 0, false
	}
	n, idx := 0, int64(0)
	ch.ForEach(func(_, c gjson.Result) bool {
		n++
		idx = c.Get("index").Int()
		return n < 2
	})
	return idx, n == 1
}

// memberOf returns the key of the member whose string holds data[at] (an
// escape inside a string), or "" when it is not a member's value (an array
// item) or its key holds an escape.
func memberOf(data []byte, at int) string {
	// The string's opening quote: the last quote before at that no
	// backslash escapes (a string holds no other).
	q := at - 1
	for ; q >= 0; q-- {
		if data[q] == '"' && jsonstring.Unescaped(data, q) {
			break
		}
	}
	k := skipBack(data, q-1)
	if k < 0 || data[k] != ':' {
		return ""
	}
	k = skipBack(data, k-1)
	if k < 0 || data[k] != '"' {
		return ""
	}
	start := bytes.LastIndexByte(data[:k], '"')
	if start < 0 || bytes.IndexByte(data[start+1:k], '\\') >= 0 {
		return ""
	}
	return string(data[start+1 : k])
}

// skipBack returns the index of the last byte at or before i that is not
// JSON whitespace, or -1.
func skipBack(data []byte, i int) int {
	for ; i >= 0; i-- {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
		default:
			return i
		}
	}
	return -1
}

func isPairKey(k string) bool {
	for _, p := range pairKeys {
		if k == p {
			return true
		}
	}
	return false
}
