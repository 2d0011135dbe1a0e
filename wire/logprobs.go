package wire

import (
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
)

// Logprobs joins the logprobs objects of one choice's parts (the chunks of
// a stream, the rounds of a tool loop) into one, as an SDK accumulates
// them: the items of their "content" token lists in order, and those of
// their "refusal" lists. A list stays null until a part has it as an array.
// The zero value is empty. It copies what it keeps. Not safe for concurrent
// use.
type Logprobs struct {
	content, refusal logprobList
	seen             bool // an object was added
}

type logprobList struct {
	items []byte // the items' JSON, comma-separated
	set   bool   // some part had the list as an array
}

// Add adds the lists of lp, a logprobs object's JSON. Anything but a
// valid object (null, no bytes, bytes cut off) adds nothing: what l writes
// is always valid JSON.
func (l *Logprobs) Add(lp []byte) {
	if len(lp) == 0 || !jsonvalid.Bytes(lp) {
		return
	}
	r := gjson.Parse(unsafe.String(unsafe.SliceData(lp), len(lp))) // read only; Add copies
	if !r.IsObject() {
		return
	}
	l.seen = true
	var content, refusal gjson.Result
	r.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			keepFirstResult(&content, v)
		case "refusal":
			keepFirstResult(&refusal, v)
		}
		return true
	})
	l.content.add(content)
	l.refusal.add(refusal)
}

// keepFirstResult sets *dst to v unless an earlier key of the name set it
// (gjson reads the first of repeated keys).
func keepFirstResult(dst *gjson.Result, v gjson.Result) {
	if !dst.Exists() {
		*dst = v
	}
}

func (p *logprobList) add(list gjson.Result) {
	if !list.IsArray() {
		return
	}
	p.set = true
	inner := strings.TrimSpace(list.Raw[1 : len(list.Raw)-1])
	if len(inner) == 0 {
		return
	}
	if len(p.items) > 0 {
		p.items = append(p.items, ',')
	}
	p.items = append(p.items, inner...)
}

// Size is the number of bytes l keeps: a bound on what it holds, for a
// caller that bounds what it keeps of a response.
func (l *Logprobs) Size() int { return len(l.content.items) + len(l.refusal.items) }

// Empty reports whether no logprobs object was added.
func (l *Logprobs) Empty() bool { return !l.seen }

// Reset empties l, keeping its buffers.
func (l *Logprobs) Reset() {
	*l = Logprobs{content: logprobList{items: l.content.items[:0]}, refusal: logprobList{items: l.refusal.items[:0]}}
}

// AppendJSON appends the joined object, {"content":[...],"refusal":[...]}
// with null for a list no part had, or null when l is empty.
func (l *Logprobs) AppendJSON(dst []byte) []byte {
	if !l.seen {
		return append(dst, "null"...)
	}
	dst = append(dst, `{"content":`...)
	dst = l.content.appendJSON(dst)
	dst = append(dst, `,"refusal":`...)
	dst = l.refusal.appendJSON(dst)
	return append(dst, '}')
}

func (p *logprobList) appendJSON(dst []byte) []byte {
	if !p.set {
		return append(dst, "null"...)
	}
	dst = append(dst, '[')
	dst = append(dst, p.items...)
	return append(dst, ']')
}
