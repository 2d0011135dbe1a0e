package guardrails

import (
	"math"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
)

// A text's logprobs follow its rewrite: a token's item shows its text, its
// bytes and the model's alternatives, so the items of tokens a redaction
// or a max_length cut touched would give back what the text no longer
// shows. The tokens are placed in the model's text by their bytes, counted
// off in order (each token as long as its bytes, its token's text when it
// has none, as wire.CutLogprobs counts them), and then:
//
//   - a token no rewrite touches keeps its item as it is;
//   - the tokens a redaction touches (a run of them, when redactions reach
//     across tokens) become one item whose token and bytes are their text
//     rewritten (the replacement, with the untouched text of the first and
//     last token around it), whose logprob is the sum of theirs (the
//     log-probability of the model writing them all; null when one of
//     theirs is not a number) and whose
//     top_logprobs is empty; no item when that text is empty (a
//     redaction to "");
//   - the tokens past a max_length cut are dropped, and a token across it
//     is such an item with its text before the cut.
//
// So the items' tokens, joined, are the text the client is shown. A JSON
// answer and a stream rewrite the same items the same way.

// edit is one rewrite of a text: bytes [start, end) of the model's text
// were replaced by repl (read-only, shared with the guard).
type edit struct {
	start, end int
	repl       []byte
}

// lpToken is one item of a logprobs token list and the bytes of the
// model's text it covers.
type lpToken struct {
	raw        string // the item's JSON (owned)
	start, end int
}

// appendTokens appends the items of list, a logprobs token list, to dst,
// placed from at on; it returns dst and the position after the last.
// The items are copied.
func appendTokens(dst []lpToken, list gjson.Result, at int) ([]lpToken, int) {
	list.ForEach(func(_, it gjson.Result) bool {
		n := tokenLen(it)
		dst = append(dst, lpToken{raw: strings.Clone(it.Raw), start: at, end: at + n})
		at += n
		return true
	})
	return dst, at
}

// tokenLen is how many bytes of the text the item it covers.
func tokenLen(it gjson.Result) int {
	if b := it.Get("bytes"); b.IsArray() {
		n := 0
		b.ForEach(func(_, _ gjson.Result) bool { n++; return true })
		return n
	}
	return len(it.Get("token").Str)
}

// appendTokenBytes appends the bytes the item covers: its bytes, or its
// token's text; tokenLen bytes either way.
func appendTokenBytes(dst []byte, raw string) []byte {
	it := gjson.Parse(raw)
	if b := it.Get("bytes"); b.IsArray() {
		b.ForEach(func(_, v gjson.Result) bool {
			dst = append(dst, byte(min(max(v.Int(), 0), 255)))
			return true
		})
		return dst
	}
	return append(dst, it.Get("token").Str...)
}

// rewriteTokens appends to dst (items, comma-separated) the items of toks
// as the text's rewrite leaves them (see above): edits sorted and apart,
// and, when cut, the text cut at trunc. changed reports that an item was
// not kept as it came.
func rewriteTokens(dst []byte, toks []lpToken, edits []edit, cut bool, trunc int) (out []byte, changed bool) {
	ei := 0
	for i := 0; i < len(toks); {
		t := toks[i]
		if cut && t.start >= trunc {
			i++
			changed = true
			continue
		}
		end := t.end
		clipped := cut && end > trunc
		if clipped {
			end = trunc
		}
		for ei < len(edits) && edits[ei].end <= t.start {
			ei++
		}
		if !clipped && (ei == len(edits) || edits[ei].start >= end) {
			dst = appendItemRaw(dst, t.raw)
			i++
			continue
		}
		// The run: the tokens up to where no edit reaches past them.
		j, ce := i+1, end
		for ; j < len(toks) && !clipped && crosses(edits[ei:], ce); j++ {
			if cut && toks[j].start >= trunc {
				break
			}
			ce = toks[j].end
			if clipped = cut && ce > trunc; clipped {
				ce = trunc
			}
		}
		dst = appendRun(dst, toks[i:j], edits[ei:], t.start, ce)
		i, changed = j, true
	}
	return dst, changed
}

// crosses reports whether an edit of edits (sorted) reaches across b.
func crosses(edits []edit, b int) bool {
	for _, e := range edits {
		if e.start >= b {
			return false
		}
		if e.end > b {
			return true
		}
	}
	return false
}

// appendRun appends the one item of run, tokens covering [cs, ce) of the
// text, rewritten by the edits (sorted) that fall in it.
func appendRun(dst []byte, run []lpToken, edits []edit, cs, ce int) []byte {
	var model []byte // the run's text as the model wrote it
	sum, known := 0.0, true
	for _, t := range run {
		model = appendTokenBytes(model, t.raw)
		// A token whose logprob is not a number (null) leaves the run's
		// unknown: counted as 0 it would claim a likelier run.
		lp := gjson.Get(t.raw, "logprob")
		known = known && lp.Type == gjson.Number
		sum += lp.Float()
	}
	at := func(p int) int { return min(max(p-cs, 0), len(model)) }
	var text []byte
	pos := cs
	for _, e := range edits {
		if e.start >= ce {
			break
		}
		if e.end <= cs {
			continue
		}
		text = append(text, model[at(pos):at(max(pos, e.start))]...)
		text = append(text, e.repl...)
		pos = max(pos, e.end)
	}
	text = append(text, model[at(pos):at(ce)]...)
	if len(text) == 0 {
		return dst // nothing of the run is shown: no item either
	}
	if math.IsInf(sum, 0) || math.IsNaN(sum) {
		sum = -math.MaxFloat64 // JSON has no infinities
	}
	if len(dst) > 0 {
		dst = append(dst, ',')
	}
	dst = append(dst, `{"token":`...)
	dst = jsonstring.Append(dst, string(text))
	dst = append(dst, `,"logprob":`...)
	if known {
		dst = strconv.AppendFloat(dst, sum, 'g', -1, 64)
	} else {
		dst = append(dst, "null"...)
	}
	dst = append(dst, `,"bytes":[`...)
	for k, b := range text {
		if k > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(b), 10)
	}
	return append(dst, `],"top_logprobs":[]}`...)
}

// appendItemRaw appends raw as the next item of dst.
func appendItemRaw(dst []byte, raw string) []byte {
	if len(dst) > 0 {
		dst = append(dst, ',')
	}
	return append(dst, raw...)
}

// rewriteList returns list (a logprobs token list of a whole text) as
// ck's last judgement of the text rewrote it; ok is false when nothing
// changed.
func rewriteList(list gjson.Result, ck *checker) ([]byte, bool) {
	if !list.IsArray() {
		return nil, false
	}
	toks, _ := appendTokens(nil, list, 0)
	items, changed := rewriteTokens(nil, toks, ck.edits, ck.cutoff, ck.trunc)
	if !changed {
		return nil, false
	}
	return append(append([]byte{'['}, items...), ']'), true
}

// heldLogprobs keeps the logprobs of a stream's held text (one text of a
// choice: its content or its refusal): they go out with the text, rewritten
// as it is, once the text they cover is out and no redaction reaches
// across them into text still held, so that the stream carries every
// item once, in order, as the JSON answer does.
//
// Items that cover bytes of the text seen wait for it to be released, and
// are bounded with it. Items that run ahead of the text (a chunk with ""
// and items, or items whose bytes outrun the chunk's text) or cover no
// bytes at all (which the text does not bound, wherever they fall) wait
// for text that may never come: those held are bounded by maxPending
// bytes of their JSON, and an item past that bound is dropped (logprobs
// are advisory; the stream goes on). A JSON answer, bounded by its size,
// keeps them.
type heldLogprobs struct {
	seen  bool // a chunk of the text had logprobs
	at    int  // bytes the items so far cover
	fed   int  // bytes of the text seen so far
	empty int  // bytes of the JSON of the held items that cover no bytes
	toks  []lpToken
	edits []edit // the checker's edits that reach past the items let out
	cut   bool   // the checker cut the text at trunc
	trunc int
}

// hold notes the token list of a chunk (any JSON value: only an array
// has items) whose text is n bytes long. An item that starts past the
// text seen, or covers no bytes, is dropped when the held items of those
// kinds would pass maxPending bytes with it; its bytes still count, so
// the items after it keep their place.
func (h *heldLogprobs) hold(list gjson.Result, n int) {
	h.fed += n
	if !list.IsArray() {
		return
	}
	h.seen = true
	ahead := 0 // the held items past the text seen, but those of no bytes
	for k := len(h.toks) - 1; k >= 0 && h.toks[k].start >= h.fed; k-- {
		if h.toks[k].end > h.toks[k].start {
			ahead += len(h.toks[k].raw)
		}
	}
	list.ForEach(func(_, it gjson.Result) bool {
		n := tokenLen(it)
		switch {
		case n == 0:
			if ahead+h.empty+len(it.Raw) > maxPending {
				return true
			}
			h.empty += len(it.Raw)
		case h.at >= h.fed:
			if ahead+h.empty+len(it.Raw) > maxPending {
				h.at += n
				return true
			}
			ahead += len(it.Raw)
		}
		h.toks = append(h.toks, lpToken{raw: strings.Clone(it.Raw), start: h.at, end: h.at + n})
		h.at += n
		return true
	})
}

// note takes ck's new edits and its cut.
func (h *heldLogprobs) note(ck *checker) {
	h.edits = append(h.edits, ck.edits...)
	ck.edits = ck.edits[:0]
	h.cut, h.trunc = ck.cutoff, ck.trunc
}

// release returns the items (joined, rewritten) of the tokens within the
// released bytes of the text (all when final), stopping short of a
// redaction that reaches past them; all reports that none is left held,
// changed that an item was not let out as it came.
func (h *heldLogprobs) release(released int, final bool) (items string, all, changed bool) {
	n := len(h.toks)
	if !final {
		n = 0
		for n < len(h.toks) && h.toks[n].end <= released {
			n++
		}
		for n > 0 && crosses(h.edits, h.toks[n-1].end) {
			n--
		}
	}
	if n == 0 {
		return "", len(h.toks) == 0, false
	}
	b, changed := rewriteTokens(nil, h.toks[:n], h.edits, h.cut, h.trunc)
	end := h.toks[n-1].end
	k := 0
	for k < len(h.edits) && h.edits[k].end <= end {
		k++
	}
	h.edits = append(h.edits[:0], h.edits[k:]...)
	for _, t := range h.toks[:n] {
		if t.end == t.start {
			h.empty -= len(t.raw)
		}
	}
	h.toks = append(h.toks[:0], h.toks[n:]...)
	return string(b), len(h.toks) == 0, changed
}

// logprobsJSON is a chunk's logprobs member with items for the list of
// key ("content" or "refusal").
func logprobsJSON(key, items string) []byte {
	if items == "" {
		return []byte("null")
	}
	if key == "refusal" {
		return []byte(`{"content":null,"refusal":[` + items + `]}`)
	}
	return []byte(`{"content":[` + items + `],"refusal":null}`)
}
