// Package jsonedit changes a JSON document in one pass: callers collect
// edits (byte ranges of the document and their replacements) while they
// walk it with gjson, then Apply copies the document once.
//
// sjson's SetBytes and DeleteBytes copy the whole document per call, so a
// request that asks for one change per part (a marker to strip, a text to
// redact) costs the body's size times its number of parts: with thousands
// of parts in a body of a few hundred kilobytes, seconds to minutes of CPU.
// An edit list costs one copy whatever the number of edits.
package jsonedit

import (
	"bytes"
	"slices"

	"github.com/tidwall/gjson"
)

// Edit replaces body[Start:End] with Text (nothing, to delete).
type Edit struct {
	Start, End int
	Text       []byte
}

// Apply returns body with edits made: a new slice, body is not modified.
// Edits may come in any order but must not overlap; ok is false (and body
// is returned) when two do or one is outside body.
func Apply(body []byte, edits []Edit) (out []byte, ok bool) {
	slices.SortFunc(edits, func(a, b Edit) int { return a.Start - b.Start })
	size, last := len(body), 0
	for _, e := range edits {
		if e.Start < last || e.End < e.Start || e.End > len(body) {
			return body, false
		}
		size += len(e.Text) - (e.End - e.Start)
		last = e.End
	}
	out = make([]byte, 0, size)
	last = 0
	for _, e := range edits {
		out = append(out, body[last:e.Start]...)
		out = append(out, e.Text...)
		last = e.End
	}
	return append(out, body[last:]...), true
}

// Root returns body's top-level value with its Index set: gjson's Parse
// leaves it 0 even when whitespace leads, and DeleteMembers and
// ReplaceValue need the positions of its members in body.
func Root(body []byte) gjson.Result {
	root := gjson.ParseBytes(body)
	if root.IsObject() {
		root.Index = bytes.IndexByte(body, '{')
	}
	return root
}

// ReplaceValue appends the edit that replaces v, a value gjson found in
// body, with text; ok is false when v's position in body is unknown.
func ReplaceValue(edits []Edit, body []byte, v gjson.Result, text []byte) ([]Edit, bool) {
	end := v.Index + len(v.Raw)
	if v.Raw == "" || end > len(body) || string(body[v.Index:end]) != v.Raw {
		return edits, false
	}
	return append(edits, Edit{Start: v.Index, End: end, Text: text}), true
}

// DeleteMembers appends the edits that delete every member of obj, an
// object gjson found in body, whose (unescaped) key is name, with the
// commas that separated them, so that the object stays valid JSON.
// Nothing is appended when obj is not an object or has no such member; ok
// is false when obj's members' positions in body are unknown.
func DeleteMembers(edits []Edit, body []byte, obj gjson.Result, name string) ([]Edit, bool) {
	if !obj.IsObject() {
		return edits, true
	}
	type member struct {
		start, end int // the key's opening quote; just past the value
		del        bool
	}
	var ms []member
	found, ok := false, true
	obj.ForEach(func(k, v gjson.Result) bool {
		m := member{start: k.Index, end: v.Index + len(v.Raw), del: k.Str == name}
		if k.Index < 0 || v.Index < m.start || m.end > len(body) || body[m.start] != '"' || string(body[v.Index:m.end]) != v.Raw {
			ok = false
			return false
		}
		found = found || m.del
		ms = append(ms, m)
		return true
	})
	if !ok || !found {
		return edits, ok
	}
	kept := slices.ContainsFunc(ms, func(m member) bool { return !m.del })
	if !kept {
		return append(edits, Edit{Start: ms[0].start, End: ms[len(ms)-1].end}), true
	}
	for a := 0; a < len(ms); a++ {
		if !ms[a].del {
			continue
		}
		b := a
		for b+1 < len(ms) && ms[b+1].del {
			b++
		}
		if b+1 < len(ms) {
			// A run of deleted members before a kept one: up to that one's key.
			edits = append(edits, Edit{Start: ms[a].start, End: ms[b+1].start})
		} else {
			// The run ends the object: from the end of the kept member before it.
			edits = append(edits, Edit{Start: ms[a-1].end, End: ms[b].end})
		}
		a = b
	}
	return edits, true
}
