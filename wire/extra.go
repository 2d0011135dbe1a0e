package wire

import (
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Members gathers a response's members that no other event kind carries,
// for one Extra event (a message's) or a Finish event's Raw (the
// response's top level): each key once, in the order it first came, at
// most maxMembers keys. Null values and empty arrays are left out, as a
// stream that never sent the key. The zero value is ready; not safe for
// concurrent use.
type Members struct {
	keys []string
	vals [][]byte
	size int
}

// maxMembers bounds the keys Members keeps: a provider's own members are a
// few; an upstream that sends thousands of distinct keys gets the first.
const maxMembers = 32

// Add records member k of a message delta: an array (annotations, a chunk
// at a time) joined to the one k had, an object in place of it. A scalar
// is left out: a provider's per-chunk figure (Together's token_id on every
// delta) belongs to no message, and the JSON answer's message has none.
func (m *Members) Add(k string, v gjson.Result) {
	if !MessageMember(v) {
		return
	}
	m.add(k, v, true)
}

// MessageMember reports whether v, the value of a message member no event
// kind carries, is one Members.Add keeps: a non-empty array or object.
func MessageMember(v gjson.Result) bool {
	return (v.IsArray() || v.IsObject()) && !isEmpty(v)
}

// OwnTop reports whether a top-level member named k of a completion or a
// chunk is one the encoders write themselves (or the stream machinery
// reads: usage, error), not a provider's own such as citations.
func OwnTop(k string) bool {
	switch k {
	case "id", "object", "created", "model", "choices", "usage", "system_fingerprint", "service_tier", "obfuscation", "error":
		return true
	}
	return false
}

// OwnMember reports whether a message or delta member named k is one an
// event kind carries (role, texts, calls) or that comes in a shape of its
// own (function_call, audio fragments), not one Members gathers.
func OwnMember(k string) bool {
	switch k {
	case "role", "content", "refusal", "reasoning_content", "reasoning", "tool_calls", "function_call", "audio":
		return true
	}
	return false
}

// Set records member k of value v, in place of the one k had (a member
// an upstream repeats whole on every chunk).
func (m *Members) Set(k string, v gjson.Result) {
	if !v.Exists() || v.Type == gjson.Null || v.IsArray() && isEmpty(v) {
		return
	}
	m.add(k, v, false)
}

func (m *Members) add(k string, v gjson.Result, join bool) {
	raw := strings.TrimSpace(v.Raw)
	for i, key := range m.keys {
		if key != k {
			continue
		}
		old := m.vals[i] // trimmed: an array ends with its ']'
		m.size -= len(old)
		if join && v.IsArray() && len(old) > 0 && old[0] == '[' {
			// Both trimmed arrays: old's items, then raw's.
			old = append(append(old[:len(old)-1], ','), strings.TrimSpace(raw[1:len(raw)-1])...)
			m.vals[i] = append(old, ']')
		} else {
			m.vals[i] = append(old[:0], raw...)
		}
		m.size += len(m.vals[i])
		return
	}
	if len(m.keys) >= maxMembers {
		return
	}
	m.keys = append(m.keys, k)
	m.vals = append(m.vals, []byte(raw))
	m.size += len(k) + len(raw)
}

// Size is about how many bytes m keeps.
func (m *Members) Size() int { return m.size }

// Reset empties m.
func (m *Members) Reset() {
	m.keys, m.vals, m.size = m.keys[:0], m.vals[:0], 0
}

// AppendJSON appends m's members ("key":value,…) to dst, the offsets of
// the annotations moved by shift characters (ShiftAnnotations); dst as it
// is when m is empty.
func (m *Members) AppendJSON(dst []byte, shift int) []byte {
	for i, k := range m.keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendString(dst, []byte(k))
		dst = append(dst, ':')
		v := m.vals[i]
		if k == "annotations" {
			v = ShiftAnnotations(v, shift)
		}
		dst = append(dst, v...)
	}
	return dst
}

// ShiftAnnotations returns the annotations array a with the offsets of its
// url_citation items (start_index, end_index: characters, counted as
// Unicode code points) moved by n, for a message whose content now follows
// n characters of text shown before the text they were given for; a as it
// is when n is 0 or a is not an array.
func ShiftAnnotations(a []byte, n int) []byte {
	arr := gjson.ParseBytes(a)
	if n == 0 || !arr.IsArray() {
		return a
	}
	out := make([]byte, 0, len(a)+16)
	out = append(out, '[')
	first := true
	arr.ForEach(func(_, v gjson.Result) bool {
		item := []byte(v.Raw)
		if v.Get("type").Str == "url_citation" {
			for _, p := range [...]string{"url_citation.start_index", "url_citation.end_index"} {
				if x := v.Get(p); x.Type == gjson.Number {
					if moved, err := sjson.SetBytes(item, p, x.Int()+int64(n)); err == nil {
						item = moved
					}
				}
			}
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = append(out, item...)
		return true
	})
	return append(out, ']')
}

// Characters counts the characters of text as annotation offsets count
// them (Unicode code points).
func Characters(text []byte) int { return utf8.RuneCount(text) }

// isEmpty reports whether array or object v has no member.
func isEmpty(v gjson.Result) bool {
	empty := true
	v.ForEach(func(_, _ gjson.Result) bool {
		empty = false
		return false
	})
	return empty
}
