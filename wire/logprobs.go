package wire

import (
	"math"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
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

// appendResponsesLogprobs appends to items (Responses LogProb objects,
// comma-separated, no brackets) those of lp's "content" token list, lp
// being a chat choice's logprobs object. The Responses API has no place
// for the refusal list: output_text carries the content's tokens only.
// Each item is rebuilt in the Responses form (token, logprob, bytes,
// top_logprobs; each top entry token, logprob, bytes) rather than copied,
// so that what an upstream adds or leaves out never breaks the schema the
// client reads: a null bytes becomes [], an entry without a string token
// or a numeric logprob is left out. lp that is not a valid object adds
// nothing.
func appendResponsesLogprobs(items, lp []byte) []byte {
	if len(lp) == 0 || !jsonvalid.Bytes(lp) {
		return items
	}
	r := gjson.Parse(unsafe.String(unsafe.SliceData(lp), len(lp))) // read only
	if !r.IsObject() {
		return items
	}
	r.Get("content").ForEach(func(_, it gjson.Result) bool {
		if !tokenLogprob(it) {
			return true
		}
		if len(items) > 0 {
			items = append(items, ',')
		}
		items = appendTokenLogprob(items, it)
		items = append(items, `,"top_logprobs":[`...)
		n := 0
		it.Get("top_logprobs").ForEach(func(_, top gjson.Result) bool {
			if !tokenLogprob(top) {
				return true
			}
			if n > 0 {
				items = append(items, ',')
			}
			n++
			items = append(appendTokenLogprob(items, top), '}')
			return true
		})
		items = append(items, "]}"...)
		return true
	})
	return items
}

// tokenLogprob reports whether it is a token entry the Responses form can
// show: an object with a string token and a numeric logprob.
func tokenLogprob(it gjson.Result) bool {
	return it.IsObject() && it.Get("token").Type == gjson.String && it.Get("logprob").Type == gjson.Number
}

// appendTokenLogprob appends `{"token":…,"logprob":…,"bytes":[…]` (the
// object left open) for the token entry it. Bytes other than integers 0 to
// 255 are left out; no bytes (null) is [].
func appendTokenLogprob(dst []byte, it gjson.Result) []byte {
	dst = append(dst, `{"token":`...)
	dst = jsonstring.Append(dst, it.Get("token").Str) // re-encoded: always valid UTF-8
	dst = append(dst, `,"logprob":`...)
	dst = append(dst, it.Get("logprob").Raw...)
	dst = append(dst, `,"bytes":[`...)
	n := 0
	it.Get("bytes").ForEach(func(_, b gjson.Result) bool {
		if b.Type == gjson.Number && b.Num >= 0 && b.Num <= 255 && b.Num == math.Trunc(b.Num) {
			if n > 0 {
				dst = append(dst, ',')
			}
			n++
			dst = strconv.AppendInt(dst, int64(b.Num), 10)
		}
		return true
	})
	return append(dst, ']')
}

// CutLogprobs parts lp, the chat logprobs object of a content text, into
// those of the text's first n bytes and those of the rest, for a caller
// that cuts the text there (a tool loop's JSON answer shown as the items
// its stream had). Tokens are counted off in order, each as long as its
// bytes (its token's text when it has no bytes): a token goes with the
// first part when it ends within n bytes. Each part is an object with the
// content list alone ({"content":[...]}); the refusal list goes with
// neither, as no Responses text shows it. lp that is not a valid object
// gives nil, nil.
func CutLogprobs(lp []byte, n int) (head, rest []byte) {
	if len(lp) == 0 || !jsonvalid.Bytes(lp) {
		return nil, nil
	}
	r := gjson.Parse(unsafe.String(unsafe.SliceData(lp), len(lp))) // read only
	if !r.IsObject() {
		return nil, nil
	}
	head, rest = []byte(`{"content":[`), []byte(`{"content":[`)
	h, t := 0, 0 // items in each
	at := 0      // bytes of text the tokens so far cover
	r.Get("content").ForEach(func(_, it gjson.Result) bool {
		if b := it.Get("bytes"); b.IsArray() {
			b.ForEach(func(_, _ gjson.Result) bool { at++; return true })
		} else {
			at += len(it.Get("token").Str)
		}
		if at <= n {
			head = appendItem(head, &h, it.Raw)
		} else {
			rest = appendItem(rest, &t, it.Raw)
		}
		return true
	})
	return append(head, "]}"...), append(rest, "]}"...)
}

// appendItem appends raw as the next member of an array holding *count.
func appendItem(dst []byte, count *int, raw string) []byte {
	if *count > 0 {
		dst = append(dst, ',')
	}
	*count++
	return append(dst, raw...)
}
