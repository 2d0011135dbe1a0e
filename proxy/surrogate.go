package proxy

import "bytes"

// surrogates moves a UTF-16 surrogate pair that an upstream split between
// two chunks back together. A server that cuts its text by UTF-16 units
// (JavaScript's string length) may end one chunk's string with the high
// half of a pair ("…\ud83d") and start the next chunk's with the low half
// ("\ude00…"); each chunk read alone decodes its half to U+FFFD, which is
// what every layer that reads the text (the tool loop's re-streamer, the
// Responses form, the guardrails) would show, where the JSON answer of the
// same request has the character. The high half is taken off the end of
// its string and put back in front of the low half in the next chunk: each
// chunk leaves at once, and both are valid JSON throughout.
type surrogates struct {
	carry [][6]byte // high halves taken off the last chunk's strings, in order
	buf   []byte    // the rewritten chunk
	hold  [][6]byte // the halves this chunk carries (an array of its own: carry is read meanwhile)
}

var escU = []byte(`\u`)

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
	for i := 0; ; {
		j := bytes.Index(data[i:], escU)
		if j < 0 {
			break
		}
		at := i + j
		i = at + 2
		if !escapes(data, at) || at+6 > len(data) {
			continue
		}
		v, ok := hex4(data[at+2 : at+6])
		if !ok {
			continue
		}
		i = at + 6
		switch {
		case v >= 0xD800 && v <= 0xDBFF && at+6 < len(data) && data[at+6] == '"':
			// A high half that ends its string: carried to the next chunk.
			var h [6]byte
			copy(h[:], data[at:at+6])
			s.hold = append(s.hold, h)
			out = append(out, data[last:at]...)
			last, changed = at+6, true
		case v >= 0xDC00 && v <= 0xDFFF && len(carry) > 0 && at > 0 && data[at-1] == '"' && escapes(data, at-1):
			// A low half that starts its string: the carried high half
			// goes in front of it.
			out = append(out, data[last:at]...)
			out = append(out, carry[0][:]...)
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

// escapes reports whether the byte at data[i] is not itself escaped (a
// backslash there starts an escape, a quote there ends its string): an
// even number of backslashes comes before it.
func escapes(data []byte, i int) bool {
	n := 0
	for k := i - 1; k >= 0 && data[k] == '\\'; k-- {
		n++
	}
	return n%2 == 0
}

// hex4 reads four hex digits.
func hex4(b []byte) (rune, bool) {
	var v rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
