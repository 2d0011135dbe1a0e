package proxy

import (
	"bytes"
	"cmp"
	"math/bits"
	"strconv"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/wire"
)

// Some upstreams (Ollama, SGLang) send "finish_reason":"" on every chunk
// before the last, and may in a JSON answer's choice. The gateway reads ""
// as no finish (wire.FinishReason), but the OpenAI schema allows only a
// reason or null in a chunk, and only a reason in an answer, and a typed
// client (a generated SDK, a schema check) rejects "" or takes it for a
// reason. A relayed chunk gets null instead (not finished yet); a JSON
// answer, which is finished, gets "stop", the reason the gateway gives an
// answer it turns into a stream without one (wire.ChatSSE).

// finishHead and finishTail are the key "finish_reason" with its quotes,
// split at its '_': the search looks for that byte, which is rare in a
// chunk (a few key names), where bytes.Index would stop at every quote.
var finishHead, finishTail = []byte(`"finish`), []byte(`_reason"`)

// Replacements for an empty finish_reason: in a chunk, in an answer.
var (
	finishNull = []byte("null")
	finishStop = []byte(`"stop"`)
)

// fillFinish appends to dst[:0] body with every "finish_reason" member whose
// value is the empty string given the value with instead (finishNull or
// finishStop; with finishStop, a JSON answer's, a null one too: an answer
// is finished), and reports true; when body has none (nearly always: one
// byte search per chunk, no parse) it returns body itself and false, and
// dst is untouched. body is only read.
func fillFinish(dst, body, with []byte) ([]byte, bool) {
	answer := bytes.Equal(with, finishStop)
	at, n := emptyFinishAt(body, 0, answer)
	if at < 0 {
		return body, false
	}
	dst = dst[:0]
	from := 0
	for at >= 0 {
		dst = append(dst, body[from:at]...)
		dst = append(dst, with...)
		from = at + n
		at, n = emptyFinishAt(body, from, answer)
	}
	return append(dst, body[from:]...), true
}

// emptyFinishAt returns the index in body, from from on, of the value ""
// (or, with null, null) of a "finish_reason" member and the value's
// length, or -1. A match is a key: its opening quote follows '{' or ','
// (inside a string a quote is escaped), and ':' and the value follow it,
// with any whitespace between.
func emptyFinishAt(body []byte, from int, null bool) (int, int) {
	for {
		i := bytes.IndexByte(body[from:], '_')
		if i < 0 {
			return -1, 0
		}
		k := from + i // at '_'
		from = k + 1
		v := finishValueAt(body, k)
		if v < 0 {
			continue
		}
		if v+1 < len(body) && body[v] == '"' && body[v+1] == '"' {
			return v, len(`""`)
		}
		if null && bytes.HasPrefix(body[v:], finishNull) {
			return v, len(finishNull)
		}
	}
}

// finishValueAt returns the index of the value of the "finish_reason"
// member whose key's '_' is body[k], or -1 when body[k] is not in such a
// key (opensKey), and ':' follows it, with any whitespace between.
func finishValueAt(body []byte, k int) int {
	if k < len(finishHead) || !bytes.HasPrefix(body[k:], finishTail) || !bytes.Equal(body[k-len(finishHead):k], finishHead) ||
		!opensKey(body, k-len(finishHead)) {
		return -1
	}
	v := skipSpace(body, k+len(finishTail))
	if v == len(body) || body[v] != ':' {
		return -1
	}
	return skipSpace(body, v+1)
}

// skipSpace returns the index of the first byte of body from i on that is
// not JSON whitespace, or len(body).
func skipSpace(body []byte, i int) int {
	for i < len(body) && isSpace(body[i]) {
		i++
	}
	return i
}

// addFinish gives each choice of a JSON answer that has no finish_reason
// member "stop", as a stream without one ends (wire.ChatSSE); body itself
// when it names the member as often as it has messages (nearly always: the
// counts of keysOfAnswer).
// An answer without the member fails the schema, and an SDK that reads it
// gets no reason.
func addFinish(body []byte) []byte { return addFinishKeys(body, keysOfAnswer(body)) }

// addFinishKeys is addFinish with the keys of body counted, or of a body
// before edits that added no message and took no finish_reason away
// (callsFinish, fillFinish): fewer finishes than now only cost a parse.
func addFinishKeys(body []byte, k answerKeys) []byte {
	if k.namesEveryFinish() {
		return body
	}
	var missing []int
	i := 0
	gjson.GetBytes(body, "choices").ForEach(func(_, ch gjson.Result) bool {
		if !ch.Get("finish_reason").Exists() {
			missing = append(missing, i)
		}
		i++
		return true
	})
	for _, i := range missing {
		if out, err := sjson.SetRawBytes(body, "choices."+strconv.Itoa(i)+".finish_reason", finishStop); err == nil {
			body = out
		}
	}
	return body
}

// namesEveryFinish reports whether the answer names the finish_reason
// member as often as it has messages.
func (k answerKeys) namesEveryFinish() bool {
	return !k.nested && k.finish > 0 && k.finish >= k.message
}

// callsFinish gives each choice of a JSON answer that made tool calls and
// has no finish reason (none, null or "": Ollama, SGLang) "tool_calls", as
// the same answer streamed through the tool loop ends; body itself when no
// choice needs it (nearly always: byte searches, no parse). fillFinish and
// addFinish then give the others "stop".
func callsFinish(body []byte) []byte { return callsFinishKeys(body, keysOfAnswer(body)) }

// callsFinishKeys is callsFinish with the keys of body counted, or of a
// body before edits that took keys away (dropNullCalls): more calls than
// now only cost a parse.
func callsFinishKeys(body []byte, k answerKeys) []byte {
	if k.calls == 0 {
		return body
	}
	if i, _ := emptyFinishAt(body, 0, true); i < 0 && k.namesEveryFinish() {
		return body
	}
	choices := gjson.GetBytes(body, "choices")
	if !choices.IsArray() {
		return body
	}
	var fix []int
	i := 0
	choices.ForEach(func(_, ch gjson.Result) bool {
		calls := ch.Get("message.tool_calls")
		if f := ch.Get("finish_reason"); (!f.Exists() || f.Type == gjson.Null || f.Type == gjson.String && f.Str == "") &&
			calls.IsArray() && len(calls.Array()) > 0 {
			fix = append(fix, i)
		}
		i++
		return true
	})
	for _, i := range fix {
		if out, err := sjson.SetBytes(body, "choices."+strconv.Itoa(i)+".finish_reason", "tool_calls"); err == nil {
			body = out
		}
	}
	return body
}

// finishes follows the choices of a relayed chat stream, so that each
// choice's finish reaches the client in a chunk of its own, after the
// choice's last content, whatever the upstream sends. A finish chunk of
// its own with nothing for a choice buffered after it (the usual end)
// goes out as it came (upstreamStream.chunk); any other finish the
// upstream sends goes out as null (nullFinishes), and due sends the
// choice's finish, with the reason the upstream last gave, before the
// last usage chunk or [DONE] (or before a failure that follows it); a
// choice that comes back with content after a finish that went out is
// owed it again. Upstreams differ: some send the finish in the same delta as the last
// content or a whole tool call (openai-go never reports such a call as
// finished), some send content after the finish or the finish twice
// (openai-go's accumulator wipes a choice's finish on any later chunk of
// it). A choice its upstream never ends (one that sends "" or null to the
// last chunk) ends the same way, with "stop", or "tool_calls" after calls:
// the JSON answer of the same request names those reasons (addFinish,
// callsFinish). Nothing is added to a stream in which no choice had
// content: that is a failure (pipeline.ErrNoContent), which fallback
// retries. The usual chunk (one choice, index 0, which had content; no
// call, no role, no finish) costs three searches; the chunks before the
// first content, and those with a call, a role, a finish or several
// choices, are parsed.
type finishes struct {
	present, seen, ended, calls uint64 // bit i: choice i came, had content, was ended by the upstream, had calls
	roled                       uint64 // bit i: choice i's role was sent (the upstream's, or one see asked for)
	owed                        uint64 // bit i: the upstream ended choice i, and due has not sent its finish yet
	reasons                     []choiceReason
	reasonArr                   [2]choiceReason // reasons' first backing
	nullAt                      []span          // where the finishes see made owed are in the chunk it took (nullFinishes)
	nullArr                     [2]span         // nullAt's first backing
	wide                        bool            // an index outside 0..63: not followed, nothing added but what is owed
	minted                      bool            // the id is the gateway's (setID): the first chunk with one of its own gives the rest of head
	nullUsage                   bool            // the upstream's last chunk with a choice ended in "usage": null: finish's chunks do too
	idEnd, fpEnd                uint16          // where the id and the fingerprint end in head
	created                     int64
	head                        []byte // the id, fingerprint and service tier, back to back (in headArr unless longer, or an id setID gave)
	headArr                     [72]byte
}

// span is where a value is in a chunk: chunk[at:end].
type span struct{ at, end int }

// choiceReason is the finish the upstream last gave a choice.
type choiceReason struct {
	index  int
	reason string
}

// chunkEdit is what see finds to change in a relayed chunk's choices: bit
// i names the i-th entry of its choices array (editChoices).
type chunkEdit struct {
	// noRole: the choice's first delta (an object, or null) came without
	// the role (missing, null or empty): it gets the assistant's. Every
	// SDK's accumulator takes the role from a choice's deltas (npm
	// openai's throws "missing role" without one).
	noRole uint64
	// dupRole: a later delta repeats the role: it loses it (a stream sends
	// the role once, in the choice's first delta).
	dupRole uint64
	// stale: the choice came again, with nothing in it, after a finish
	// that went out as it came; staleChoices: those choices (bit i:
	// choice i).
	stale, staleChoices uint64
	// finishing: the choices (bit i: choice i) whose finish see made owed;
	// owed: the choices whose finish was owed before this chunk; odd: one
	// of them ended in a delta with content or a call, or named its finish
	// twice. Only a chunk without odd may go out with its finishes.
	finishing, owed uint64
	odd             bool
}

// see takes one relayed chunk and its keys (keysOf), and reports whether
// it holds no choice (a usage chunk's "choices":[]), and what the chunk's
// choices need changed (chunkEdit). Every finish of a choice it follows is
// owed, with its reason, and its value's place is in nullAt: the caller
// sends the chunk with null there (nullFinishes).
func (f *finishes) see(chunk []byte, ks chunkKeys) (none bool, e chunkEdit) {
	f.nullAt = f.nullArr[:0]
	e.owed = f.owed
	if f.seen&1 != 0 && (f.ended&^f.owed)&1 == 0 && !ks.named && (f.idEnd != 0 || !bytes.Contains(chunk, idKey)) && !ks.calls && onlyIndexZero(chunk) &&
		!bytes.Contains(chunk, roleKey) { // an id is read first: rename's sameID needs it
		return false, e
	}
	view := unsafe.String(unsafe.SliceData(chunk), len(chunk)) // read only here; nothing kept refers to it
	if id := headField(view, "id"); f.idEnd == 0 || f.minted && id != "" {
		// Read from the first chunk that has an id (not an Azure prompt
		// filter's first, whose id is ""): an SDK's accumulator keeps the
		// last chunk's fingerprint and service tier, so the made chunk
		// must repeat them. An id the gateway gave the stream before
		// (setID) stays its id, and what that chunk lacks stays what the
		// chunks before it gave.
		fp, tier, created := headField(view, "system_fingerprint"), headField(view, "service_tier"), gjson.Get(view, "created").Int()
		if f.minted {
			old := string(f.head)
			id, f.minted = old[:f.idEnd], false
			fp, tier = cmp.Or(fp, old[f.idEnd:f.fpEnd]), cmp.Or(tier, old[f.fpEnd:])
			created = cmp.Or(f.created, created) // the one the chunks before it went out with (sameCreated)
		}
		f.head = append(f.headArr[:0], id...)
		f.idEnd = uint16(len(f.head))
		f.created = created
		f.head = append(f.head, fp...)
		f.fpEnd = uint16(len(f.head))
		f.head = append(f.head, tier...)
	}
	none = true
	pos := 0
	cs := gjson.Get(view, "choices")
	if !cs.IsArray() {
		return true, e // no choice: not even a "choices": null, which ForEach would visit as one
	}
	cs.ForEach(func(_, c gjson.Result) bool {
		none = false
		i := c.Get("index")
		p := pos
		pos++
		if i.Type != gjson.Number || i.Num < 0 || i.Num > 63 || i.Num != float64(int(i.Num)) {
			f.wide = true // this choice is not followed: it goes out as it came
			return true
		}
		var at uint64 // its position's bit, for the edits: none past 63
		if p < 64 {
			at = 1 << p
		}
		bit := uint64(1) << int(i.Num)
		d := c.Get("delta")
		content := wire.DeltaHasContent(d)
		r := d.Get("role")
		switch {
		case f.roled&bit != 0:
			if r.Exists() {
				e.dupRole |= at
			}
		case r.Type == gjson.String && r.Str != "":
			f.roled |= bit
		case d.IsObject() || d.Type == gjson.Null:
			e.noRole |= at
			f.roled |= bit
		}
		fr, twice := finishOf(c, ks.named)
		named := fr.Type == gjson.String && fr.Str != ""
		if f.ended&bit != 0 && f.owed&bit == 0 {
			// The choice comes again after a finish that went out as it
			// came (stream.go, chunk): openai-go's accumulator wipes that
			// finish on this chunk. With nothing in it (a usage chunk that
			// repeats the choice, a filter's annotations), it may be taken
			// out (stale, chunk decides); else due sends the finish again,
			// after it.
			if !content && !named {
				e.stale |= at
				e.staleChoices |= bit
				return true
			}
			f.owed |= bit
		}
		f.present |= bit
		if content {
			f.seen |= bit
		}
		if tc := d.Get("tool_calls"); tc.IsArray() && tc.Get("0").Exists() {
			f.calls |= bit
		}
		if named {
			f.ended |= bit
			if v := fr.Index; v > 0 && v+len(fr.Raw) <= len(chunk) && string(chunk[v:v+len(fr.Raw)]) == fr.Raw {
				// The finish goes out from due.
				f.owed |= bit
				f.setReason(int(i.Num), fr.Str)
				f.nullAt = append(f.nullAt, span{v, v + len(fr.Raw)})
				e.finishing |= bit
				// A delta with anything in it beside the finish (DeepSeek's
				// and vLLM-style servers' last chunk has "content":"", a
				// one-chunk answer the role) is not a finish chunk of its
				// own: the finish goes in one after it (due).
				e.odd = e.odd || content || twice || !emptyObject(d)
			}
		}
		return true
	})
	return none, e
}

// finishOf returns choice c's finish_reason: with named (some finish in
// the chunk is a reason), the last member of that name, as the SDKs read a
// repeated key, where gjson's Get finds the first, and whether it is
// repeated.
func finishOf(c gjson.Result, named bool) (fr gjson.Result, twice bool) {
	if !named {
		return c.Get("finish_reason"), false
	}
	n := 0
	c.ForEach(func(k, v gjson.Result) bool {
		if k.Str == "finish_reason" {
			fr = v
			n++
		}
		return true
	})
	return fr, n > 1
}

// setReason keeps reason as choice i's finish, the upstream's last word.
func (f *finishes) setReason(i int, reason string) {
	reason = keptReason(reason)
	if f.reasons == nil {
		f.reasons = f.reasonArr[:0]
	}
	for k := range f.reasons {
		if f.reasons[k].index == i {
			f.reasons[k].reason = reason
			return
		}
	}
	f.reasons = append(f.reasons, choiceReason{i, reason})
}

// keptReason returns reason, a view of a chunk, as a string of its own:
// the usual ones without a copy.
func keptReason(reason string) string {
	for _, r := range knownReasons {
		if reason == r {
			return r
		}
	}
	if len(reason) > maxHeadField {
		return "stop" // no provider's reason is this long
	}
	return strings.Clone(reason)
}

var knownReasons = [...]string{"stop", "length", "tool_calls", "content_filter", "function_call"}

// reason returns the finish the upstream last gave choice i, or "".
func (f *finishes) reason(i int) string {
	for _, r := range f.reasons {
		if r.index == i {
			return r.reason
		}
	}
	return ""
}

// nullFinishes gives the string values at the spans at (ascending: see's
// nullAt, read by gjson from body) null instead, and returns the result:
// body itself, edited in place and shortened by what that took out (its
// bytes past the new end are left as they were), unless a value is shorter
// than null ("x"), which takes a copy (in dst, reused). A span that holds
// no string is passed over.
func nullFinishes(dst, body []byte, at []span) (_, fix []byte) {
	for k := len(at) - 1; k >= 0; k-- { // from the last, so that the others stay where they were
		v, end := at[k].at, at[k].end
		if end > len(body) || end-v < 2 || body[v] != '"' || body[end-1] != '"' {
			continue
		}
		if end-v < len(finishNull) {
			dst = append(append(append(dst[:0], body[:v]...), finishNull...), body[end:]...)
			body, dst = dst, body[:0:0] // body is dst's now: never both
			fix = body
			continue
		}
		copy(body[v:], finishNull)
		n := copy(body[v+len(finishNull):], body[end:])
		body = body[:v+len(finishNull)+n]
	}
	return body, fix
}

// dropStale takes the choices at the positions stale names (see) out of
// chunk, and reports whether none is left. chunk itself is only read.
func dropStale(chunk []byte, stale uint64) ([]byte, bool) {
	for pos := 63; pos >= 0; pos-- { // from the last, so that each position still names its choice
		if stale&(1<<pos) != 0 {
			if out, err := sjson.DeleteBytes(chunk, "choices."+strconv.Itoa(pos)); err == nil {
				chunk = out
			}
		}
	}
	return chunk, !gjson.GetBytes(chunk, "choices.0").Exists()
}

// editChoices makes the changes e names in chunk (see): roles given and
// taken out. chunk itself is only read.
func editChoices(chunk []byte, e chunkEdit) []byte {
	chunk = addRoles(chunk, e.noRole)
	for m := e.dupRole; m != 0; m &= m - 1 {
		if out, err := sjson.DeleteBytes(chunk, "choices."+strconv.Itoa(bits.TrailingZeros64(m))+".delta.role"); err == nil {
			chunk = out
		}
	}
	return chunk
}

var roleKey = []byte(`"role"`)

// id is the stream's completion id: the first chunk's that has one ("" until then).
func (f *finishes) id() []byte {
	return f.head[:f.idEnd]
}

// setID makes id the stream's completion id, before any chunk gave one,
// and returns it as head holds it.
func (f *finishes) setID(id string) []byte {
	rest := f.head[f.idEnd:] // the fingerprint and tier read so far
	head := make([]byte, 0, len(id)+len(rest))
	f.head = append(append(head, id...), rest...)
	f.fpEnd += uint16(len(id) - int(f.idEnd))
	f.idEnd = uint16(len(id))
	f.minted = true
	return f.head[:f.idEnd]
}

var idKey = []byte(`"id"`)

// addRoles gives the deltas of chunk's choices at the positions noRole
// names (finishes.see) the assistant's role; chunk itself when it cannot.
// Rare: an upstream that sends no role.
func addRoles(chunk []byte, noRole uint64) []byte {
	for pos := 0; noRole != 0; pos, noRole = pos+1, noRole>>1 {
		if noRole&1 != 0 {
			if out, err := sjson.SetBytes(chunk, "choices."+strconv.Itoa(pos)+".delta.role", "assistant"); err == nil {
				chunk = out
			}
		}
	}
	return chunk
}

// headField is a chunk's string member key, or "" when it is longer than
// maxHeadField: no provider's id, fingerprint or tier is.
func headField(chunk, key string) string {
	if s := gjson.Get(chunk, key).Str; len(s) <= maxHeadField {
		return s
	}
	return ""
}

const maxHeadField = 1024

// onlyIndexZero reports whether chunk has one "index" member, whose value
// is 0: the index of its one choice, in a chunk without tool calls. The
// search is for its 'x', rare in a chunk, where one for the quote would
// stop at every key; a quote inside a string is escaped, so text never
// counts.
func onlyIndexZero(chunk []byte) bool {
	zero := false
	n := 0
	for from := 0; ; {
		i := bytes.IndexByte(chunk[from:], 'x')
		if i < 0 {
			return n == 1 && zero
		}
		k := from + i // at 'x'
		from = k + 1
		if k < 5 || string(chunk[k-5:k]) != `"inde` || !bytes.HasPrefix(chunk[k+1:], []byte(`":`)) {
			continue
		}
		n++
		v := k + 3
		zero = v+1 < len(chunk) && chunk[v] == '0' && (chunk[v+1] == ',' || chunk[v+1] == '}')
	}
}

// complete reports whether some choice had content and every choice has
// ended: an upstream whose body then ends without [DONE] sent the whole
// answer.
func (f *finishes) complete() bool {
	return f.seen != 0 && !f.wide && f.present&^f.ended == 0
}

// open reports whether due would end a choice: one the upstream left open,
// or one whose finish is owed.
func (f *finishes) open() bool {
	return f.unended() != 0
}

// unended returns the choices due ends: those whose finish is owed, and,
// when some choice had content and the stream is followed, those the
// upstream left open.
func (f *finishes) unended() uint64 {
	u := f.owed
	if f.seen != 0 && !f.wide {
		u |= f.present &^ f.ended
	}
	return u
}

// chunkKeys is what one pass over a chunk's '_' bytes finds (keysOf).
type chunkKeys struct {
	named bool // a "finish_reason" member's value is a non-empty string
	empty bool // one's value is "" (fillFinish's to rewrite)
	calls bool // a "tool_calls" member
}

// keysOf finds chunk's "finish_reason" and "tool_calls" members. Both keys
// hold a '_', which the search looks for: it is rare in a chunk, where a
// search for a quote would stop at every key. A quote inside a string is
// escaped, so text never counts.
func keysOf(chunk []byte) (ks chunkKeys) {
	for from := 0; ; {
		i := bytes.IndexByte(chunk[from:], '_')
		if i < 0 {
			return ks
		}
		k := from + i // at '_'
		from = k + 1
		switch v := finishValueAt(chunk, k); {
		case v >= 0:
			if v+1 < len(chunk) && chunk[v] == '"' {
				ks.empty = ks.empty || chunk[v+1] == '"'
				ks.named = ks.named || chunk[v+1] != '"'
			}
		case k >= len(`"tool`) && string(chunk[k-len(`"tool`):k]) == `"tool` && bytes.HasPrefix(chunk[k:], []byte(`_calls"`)):
			ks.calls = true
		}
	}
}

// due appends to dst the finish chunk of every choice whose finish the
// client has not had (unended), when some choice had content, with the
// reason the upstream last gave it ("tool_calls" after calls, "stop"
// otherwise, when it gave none), and marks them ended; it returns dst
// unchanged when there is none. model is the client's name for the model.
// The chunk has no usage member: a "usage":null would clear, in npm
// openai's accumulator, a usage the upstream sent before it.
func (f *finishes) due(dst []byte, model string) []byte {
	return f.finish(dst, model, f.unended())
}

// dueBeforeFailure is due for a stream that failed: only the finishes the
// upstream sent (owed) go out, as they did when they went out as they came;
// a choice it left open was cut.
func (f *finishes) dueBeforeFailure(dst []byte, model string) []byte {
	return f.finish(dst, model, f.owed)
}

// finish appends to dst the finish chunk of the choices open names, and
// marks them ended; dst unchanged when open is 0.
func (f *finishes) finish(dst []byte, model string, open uint64) []byte {
	if open == 0 {
		return dst
	}
	f.ended |= open
	f.owed &^= open
	h := wire.Header{ID: string(f.head[:f.idEnd]), Created: f.created, Model: model}
	dst = wire.AppendHead(dst, "chat.completion.chunk", h)
	dst = wire.AppendServiceTier(dst, string(f.head[f.fpEnd:]))
	dst = wire.AppendFingerprint(dst, string(f.head[f.idEnd:f.fpEnd]))
	dst = append(dst, `,"choices":[`...)
	for i := 0; open != 0; i, open = i+1, open>>1 {
		if open&1 == 0 {
			continue
		}
		if dst[len(dst)-1] != '[' {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"delta":{},"logprobs":null,"finish_reason":`...)
		switch r := f.reason(i); {
		case r != "":
			dst = append(jsonstring.Append(dst, r), '}')
		case f.calls&(1<<i) != 0:
			dst = append(dst, `"tool_calls"}`...)
		default:
			dst = append(dst, `"stop"}`...)
		}
	}
	if f.nullUsage {
		// As the upstream's chunks (usage asked for): every chunk but the
		// usage chunk says so (the meter takes it out where the client did
		// not ask).
		return append(dst, `],"usage":null}`...)
	}
	return append(dst, "]}"...)
}

// emptyObject reports whether v is absent, null, or an object with no
// members.
func emptyObject(v gjson.Result) bool {
	if !v.IsObject() {
		return true
	}
	return strings.TrimSpace(v.Raw[1:len(v.Raw)-1]) == ""
}
