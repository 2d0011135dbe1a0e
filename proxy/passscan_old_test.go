package proxy

// The three scans of a pass-through answer as they were before they shared
// jsonLexer (renamed old*), kept so that the differential fuzz targets
// (passscan_diff_test.go) can check that the scans built on it read every
// text as these did.

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/responses"
	"github.com/llmgw/gateway/wire"
)

// oldUsageTap finds the token usage a pass-through answer reports while its
// body is copied to the client, so that the call is metered as a chat call
// is (tokens against the tenant's token limits, spend against its budgets,
// a row in the usage record). It keeps only what it needs, whatever the
// body's size: in a JSON answer (embeddings, completions, a native
// Responses answer) the top-level "usage" object, found by following the
// nesting byte by byte; in an SSE answer the last usage object of its data
// lines ("usage", or a Responses event's "response.usage"), one line at a
// time, a line longer than maxUsageLine (an event that carries a whole
// image) followed byte by byte as a JSON answer is.
type oldUsageTap struct {
	sse   bool
	found []byte // the usage object's bytes: the JSON answer's, or the last of the stream's
	over  bool   // found would exceed maxUsageBytes: the answer's usage is not read
	text  int    // bytes of generated text an SSE answer carried (see outputGuess)

	// JSON: where the scan is. It looks for the member named path[0] of
	// the top-level object, then path[1] of that member's object, and so
	// on, and copies the last one's object into found, as gjson reads a
	// path: an object that lacks the rest of the path is passed over for a
	// later member of its name, but of the last name only the first member
	// counts.
	path       []string // nil: usagePath
	level      int      // path members entered so far: keys are looked at depth level+1
	done       bool     // the path's object cannot come any more
	depth      int
	inString   bool
	escaped    bool
	expectKey  bool   // at depth 1, the next string is a member's key
	keying     bool   // reading a depth-1 key into key
	key        []byte // the last depth-1 key (its first bytes)
	keyDone    bool   // key is complete; its colon comes next
	valueNext  bool   // the next value is a path member's
	usageKey   bool   // the path's last name was seen at this level: only its first value counts, as gjson reads it
	capturing  bool   // inside the usage object, copying it to found
	captured   bool   // found holds the whole usage object
	keyTooLong bool   // longer than maxUsageKey: not usage
	keyEscaped bool   // has an escape: may spell usage once unescaped

	// SSE: the line being read.
	line     []byte
	lineOver bool
	long     *[2]oldUsageTap // scan a data line over maxUsageLine for usage and response.usage (kept for the next)
	longOn   bool            // the line being read is such a line
}

// write takes the next bytes of the answer.
func (u *oldUsageTap) write(p []byte) {
	if u.sse {
		u.lines(p)
		return
	}
	u.scan(p)
}

// scan follows a JSON answer's nesting and copies its top-level usage
// object into found.
func (u *oldUsageTap) scan(p []byte) {
	if u.captured || u.done {
		return // the first usage member is the one read, as gjson would
	}
	path := u.path
	if path == nil {
		path = usagePath
	}
	keyDepth := u.level + 1
	for i := 0; i < len(p); i++ {
		if !u.capturing && !u.keying && !u.escaped {
			// Bytes that change nothing here are skipped in a tight loop:
			// in a string all but its quote and escapes, deeper than the
			// top level all but strings and brackets (an embeddings
			// answer's numbers).
			skip := &oldDeepSkip
			switch {
			case u.inString:
				skip = &oldStringSkip
			case u.depth <= keyDepth:
				skip = nil
			}
			if skip != nil {
				for i < len(p) && skip[p[i]] {
					i++
				}
				if i == len(p) {
					return
				}
			}
		}
		c := p[i]
		if u.capturing {
			if len(u.found) >= maxUsageBytes {
				u.capturing, u.over, u.found = false, true, nil
			} else {
				u.found = append(u.found, c)
			}
		}
		if u.inString {
			switch {
			case u.escaped:
				u.escaped = false
				u.keyEscaped = u.keyEscaped || u.keying
			case c == '\\':
				u.escaped = true
			case c == '"':
				u.inString = false
				if u.keying {
					u.keying, u.keyDone = false, true
				}
			case u.keying:
				if len(u.key) < maxUsageKey {
					u.key = append(u.key, c)
				} else {
					u.keyTooLong = true
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			u.inString = true
			if u.depth == keyDepth && u.expectKey {
				u.expectKey, u.keying, u.keyTooLong, u.keyEscaped = false, true, false, false
				u.key = u.key[:0]
			}
		case ':':
			if u.depth == keyDepth && u.keyDone {
				u.keyDone = false
				last := u.level+1 == len(path)
				switch {
				case last && u.usageKey:
				case u.keyEscaped && last:
					// It may spell the name, as gjson reads it: a later
					// member of that name is not the one gjson would read.
					u.usageKey = true
				case u.keyEscaped:
					// It may spell a name of the path, whose object gjson
					// would read: give up rather than read another.
					u.done = true
					return
				case !u.keyTooLong && string(u.key) == path[u.level]:
					u.valueNext = true
					u.usageKey = u.usageKey || last
				}
				continue
			}
		case ',':
			if u.depth == keyDepth {
				u.expectKey = true
			}
		case '{', '[':
			enter := false
			if u.depth == keyDepth && u.valueNext && c == '{' && !u.over {
				if u.level+1 < len(path) {
					enter = true // the path goes on inside this object
				} else {
					u.capturing = true
					u.found = append(u.found[:0], c)
				}
			}
			u.depth++
			if enter {
				u.level++
				keyDepth = u.level + 1
				u.usageKey = false
			}
			if u.depth == keyDepth && c == '{' {
				u.expectKey = true
			}
		case '}', ']':
			u.depth--
			if u.capturing && u.depth == keyDepth {
				u.capturing, u.captured = false, true
				return
			}
			if u.depth < keyDepth && u.level > 0 {
				// The path's member ended without the rest of the path.
				if u.usageKey {
					u.done = true // it had the last name, not an object: gjson reads no other
					return
				}
				u.level--
				keyDepth = u.level + 1
			}
		}
		u.valueNext = false
	}
}

// settled reports whether the rest of a JSON answer cannot change what the
// tap found: its usage object is whole, too large, or cannot come.
func (u *oldUsageTap) settled() bool {
	if u.captured || u.done || u.over {
		return true
	}
	// The top-level usage member was seen and its value is not an object.
	return u.usageKey && u.level == 0 && len(u.path) <= 1 && !u.valueNext && !u.capturing
}

// oldStringSkip and oldDeepSkip mark the bytes scan passes over in a string and
// below the top level.
var oldStringSkip, oldDeepSkip = func() (str, deep [256]bool) {
	for c := range 256 {
		str[c] = c != '"' && c != '\\'
		deep[c] = str[c] && c != '{' && c != '}' && c != '[' && c != ']'
	}
	return str, deep
}()

// lines reads an SSE answer line by line and keeps the last usage object
// of its data lines.
func (u *oldUsageTap) lines(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		switch {
		case u.lineOver:
			u.scanLong(part)
		case len(u.line)+len(part) > maxUsageLine:
			u.lineOver = true
			u.startLong(part)
		default:
			u.line = append(u.line, part...)
		}
		if i < 0 {
			return
		}
		p = p[i+1:]
		if u.lineOver {
			u.endLong()
		} else {
			u.event(bytes.TrimRight(u.line, "\r"))
		}
		u.line, u.lineOver = u.line[:0], false
	}
}

// startLong begins the scan of a line grown past maxUsageLine, whose
// bytes so far are u.line then part, if it is a data line; the rest of the
// line passes through scanLong.
func (u *oldUsageTap) startLong(part []byte) {
	const prefix = "data:"
	var head [len(prefix)]byte
	n := copy(head[:], u.line)
	n += copy(head[n:], part)
	u.longOn = n == len(prefix) && string(head[:]) == prefix
	if u.longOn {
		if u.long == nil {
			u.long = &[2]oldUsageTap{}
		}
		for i, path := range [2][]string{usagePath, responseUsagePath} {
			sc := &u.long[i]
			*sc = oldUsageTap{path: path, found: sc.found[:0], key: sc.key[:0]}
		}
		skip := min(len(prefix), len(u.line))
		u.scanLong(u.line[skip:])
		u.scanLong(part[len(prefix)-skip:])
	}
	u.line = u.line[:0]
}

// scanLong takes the next bytes of a long line.
func (u *oldUsageTap) scanLong(p []byte) {
	if !u.longOn || len(p) == 0 {
		return
	}
	u.long[0].scan(p)
	u.long[1].scan(p)
}

// endLong keeps the usage a long data line carried, as event does for a
// line kept whole: its "usage", else its "response.usage".
func (u *oldUsageTap) endLong() {
	if !u.longOn {
		return
	}
	u.longOn = false
	for i := range u.long {
		sc := &u.long[i]
		switch {
		case sc.over:
			u.over, u.found = true, nil
			return
		case sc.captured && jsonvalid.Bytes(sc.found):
			u.over, u.found = false, append(u.found[:0], sc.found...)
			return
		}
	}
}

// event keeps the usage object of one SSE line, if it is a data line with
// one.
func (u *oldUsageTap) event(line []byte) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' || !jsonvalid.Bytes(data) {
		return
	}
	u.text += generatedText(data)
	v := gjson.GetBytes(data, "usage")
	if !v.IsObject() {
		v = gjson.GetBytes(data, "response.usage") // a Responses API event
	}
	if !v.IsObject() {
		return
	}
	if len(v.Raw) > maxUsageBytes {
		u.over, u.found = true, nil
		return
	}
	u.over, u.found = false, append(u.found[:0], v.Raw...)
}

// usage returns the counts of the usage the answer reported: the chat
// form (prompt_tokens, completion_tokens: chat, completions, embeddings)
// or the Responses form (input_tokens, output_tokens); ok is false when
// the answer reported none that the tap could keep. The counts are then
// a guess of the output: a streamed answer without usage (a completions
// stream that did not ask for it, or one cut short) still made the text it
// sent, about four bytes a token.
func (u *oldUsageTap) usage() (wire.ChatUsage, bool) {
	if u.over || len(u.found) == 0 || (!u.sse && !u.captured) || !jsonvalid.Bytes(u.found) {
		return wire.ChatUsage{Completion: int64(u.text+3) / 4}, false
	}
	v := gjson.ParseBytes(u.found)
	if v.Get("input_tokens").Exists() || v.Get("output_tokens").Exists() {
		return wire.ParseResponsesUsage(v)
	}
	return wire.ParseChatUsage(v)
}

// oldOwnerTap reads the id of the response a pass-through answer of POST
// /v1/responses creates: a JSON answer's top-level "id" when its "object"
// is "response"; an event stream's first data line with a "response.id"
// (response.created). It follows the bytes as they pass and keeps only a
// few of them, whatever the answer's size.
type oldOwnerTap struct {
	sse  bool
	sc   oldIDScan
	col  int  // SSE: bytes of the current line matched against "data:"
	skip bool // SSE: the current line is not a data line
	done bool
}

// pending reports whether a JSON answer's id is being read or was read
// while its object is not yet known: its bytes must wait for the record.
func (o *oldOwnerTap) pending() bool {
	return !o.sse && !o.done && (o.sc.hasID || o.sc.capture == wantID)
}

// write takes the next bytes of the answer; it returns the response id
// once, with the bytes that complete it.
func (o *oldOwnerTap) write(p []byte) (string, bool) {
	if o.done {
		return "", false
	}
	if !o.sse {
		o.sc.scan(p)
		if !o.sc.done {
			return "", false
		}
		o.done = true
		return o.sc.id, o.sc.hasID && o.sc.hasObject && o.sc.object == "response"
	}
	const prefix = "data:"
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if !o.skip && o.col < len(prefix) {
			n := min(len(prefix)-o.col, len(part))
			if string(part[:n]) != prefix[o.col:o.col+n] {
				o.skip = true
			}
			o.col += n
			part = part[n:]
		}
		if !o.skip && o.col == len(prefix) {
			o.sc.scan(part)
			if o.sc.hasID {
				o.done = true
				return o.sc.id, true
			}
		}
		if i < 0 {
			return "", false
		}
		p = p[i+1:]
		o.sc.reset()
		o.col, o.skip = 0, false
	}
	return "", false
}

// oldIDScan finds the "id" and "object" string members of a JSON object (or
// of its member object named in: a Responses event's "response") by
// following the nesting byte by byte, as a JSON reader takes the first
// member of a name. An escaped key at those levels ends the scan with
// nothing found; an escaped or over-long value is not kept.
type oldIDScan struct {
	in string

	depth     int
	entered   bool // the object at depth 2 is the member named in
	seenIn    bool
	inString  bool
	escaped   bool
	expectKey bool
	keying    bool
	key       []byte // the key being read, its first maxScanKey bytes
	keyLong   bool
	keyEsc    bool
	afterKey  bool // a key was read: its colon comes next
	want      int  // what the next value is (want*)
	capture   int  // the want* whose string value is being read into val
	val       []byte
	valBad    bool

	id, object       string
	hasID, hasObject bool
	seenID, seenObj  bool
	done             bool
}

// reset readies s for another object, keeping its buffers.
func (s *oldIDScan) reset() {
	*s = oldIDScan{in: s.in, key: s.key[:0], val: s.val[:0]}
}

// keyLevel reports whether the object at the current depth has the
// members oldIDScan reads: the top level's, or the member named in's.
func (s *oldIDScan) keyLevel() bool {
	return s.depth == 1 || (s.depth == 2 && s.entered)
}

// member is what the value after the key just read is.
func (s *oldIDScan) member() int {
	target := s.in == "" || s.depth == 2
	switch k := string(s.key); {
	case s.keyLong:
	case !target && k == s.in && !s.seenIn:
		s.seenIn = true
		return wantIn
	case target && k == "id" && !s.seenID:
		s.seenID = true
		return wantID
	case target && k == "object" && !s.seenObj:
		s.seenObj = true
		return wantObject
	}
	return wantNone
}

// scan takes the next bytes of the JSON text.
func (s *oldIDScan) scan(p []byte) {
	for i := 0; i < len(p) && !s.done; i++ {
		c := p[i]
		if s.inString {
			switch {
			case s.escaped:
				s.escaped = false
			case c == '\\':
				s.escaped = true
				s.keyEsc = s.keyEsc || s.keying
				s.valBad = s.valBad || s.capture != wantNone
			case c == '"':
				s.inString = false
				if s.keying {
					s.keying, s.afterKey = false, true
				}
				if s.capture != wantNone {
					s.keep()
				}
			case s.keying:
				if len(s.key) < maxScanKey {
					s.key = append(s.key, c)
				} else {
					s.keyLong = true
				}
			case s.capture != wantNone:
				if len(s.val) < maxScanValue {
					s.val = append(s.val, c)
				} else {
					s.valBad = true
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			s.inString = true
			switch {
			case s.expectKey && s.keyLevel():
				s.expectKey, s.keying, s.keyLong, s.keyEsc = false, true, false, false
				s.key = s.key[:0]
			case s.want == wantID || s.want == wantObject:
				s.capture, s.valBad = s.want, false
				s.val = s.val[:0]
			}
		case ':':
			if s.afterKey {
				s.afterKey = false
				if s.keyEsc {
					s.done = true // it may spell a name read here: give up
					return
				}
				s.want = s.member()
				continue
			}
		case ',':
			if s.keyLevel() {
				s.expectKey = true
			}
		case '{', '[':
			s.depth++
			switch {
			case s.depth == 1 && c != '{':
				s.done = true // not an object
				return
			case s.want == wantIn && c == '{':
				s.entered = true
			}
			if c == '{' && s.keyLevel() {
				s.expectKey = true
			}
		case '}', ']':
			if s.depth <= 1 || (s.entered && s.depth == 2) {
				s.done = true // the object read ended
				return
			}
			s.depth--
		}
		s.want = wantNone
	}
}

// keep ends the string value being read.
func (s *oldIDScan) keep() {
	what := s.capture
	s.capture = wantNone
	if s.valBad || len(s.val) == 0 {
		return
	}
	switch what {
	case wantID:
		s.id, s.hasID = string(s.val), true
	case wantObject:
		s.object, s.hasObject = string(s.val), true
	}
	if s.hasID && (s.in != "" || s.hasObject) {
		s.done = true
	}
}

// oldItemTap reads the ids of a pass-through Responses answer's output
// items: a JSON answer's top-level "output"[]."id" when its "object" is
// "response"; an event stream's data lines' "item"."id" (the
// response.output_item.* events) and "response"."output"[]."id". Each id
// is returned once, at most responses.MaxItems of them; the rest are not
// recorded. It keeps a few bytes, whatever the answer's size.
type oldItemTap struct {
	sse     bool
	sc      oldItemScan
	col     int  // SSE: bytes of the current line matched against "data:"
	skip    bool // SSE: the current line is not a data line
	stopped bool
	// spent: a JSON answer's bytes went out before its object was known
	// (spend); ids read while it is still unknown go out unrecorded, so
	// they are dropped, and those read once it is known are recorded.
	spent    bool
	returned map[string]struct{}
}

func newOldItemTap(sse bool) *oldItemTap {
	return &oldItemTap{sse: sse, sc: oldItemScan{sse: sse}, returned: map[string]struct{}{}}
}

// pending reports whether a JSON answer's item ids were read while its
// object is not yet known: its bytes must wait for the record.
func (t *oldItemTap) pending() bool {
	return !t.sse && !t.stopped && t.sc.object == objUnknown && (len(t.sc.found) > 0 || t.sc.capture == capID)
}

// spend is told that a JSON answer's bytes go out without waiting for its
// object: the ids they carried, and any read until the object is known,
// are not recorded (never after the client has them); those read after a
// "response" object are.
func (t *oldItemTap) spend() {
	if !t.sse && t.sc.object == objUnknown {
		t.spent = true
		t.sc.found = t.sc.found[:0]
	}
}

// write takes the next bytes of the answer and returns the item ids read
// in them (or held until now) that are to be recorded before they go out.
func (t *oldItemTap) write(p []byte) []string {
	if t.stopped {
		return nil
	}
	if !t.sse {
		t.sc.scan(p)
		switch t.sc.object {
		case objResponse:
			ids := t.take()
			t.stopped = t.stopped || t.sc.done
			return ids
		case objOther:
			t.stopped, t.sc.found = true, nil
		case objUnknown:
			if t.spent {
				t.sc.found = t.sc.found[:0] // out before the object is known
			}
		}
		if t.sc.done && t.sc.object != objResponse {
			t.stopped, t.sc.found = true, nil
		}
		return nil
	}
	const prefix = "data:"
	for len(p) > 0 && !t.stopped {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		if !t.skip && t.col < len(prefix) {
			n := min(len(prefix)-t.col, len(part))
			if string(part[:n]) != prefix[t.col:t.col+n] {
				t.skip = true
			}
			t.col += n
			part = part[n:]
		}
		if !t.skip && t.col == len(prefix) {
			t.sc.scan(part)
		}
		if i < 0 {
			break
		}
		p = p[i+1:]
		t.sc.reset()
		t.col, t.skip = 0, false
	}
	return t.take()
}

// take returns the ids read and not returned before, up to the bound.
func (t *oldItemTap) take() []string {
	var out []string
	for _, id := range t.sc.found {
		if _, ok := t.returned[id]; ok {
			continue
		}
		if len(t.returned) >= responses.MaxItems {
			t.stopped = true
			break
		}
		t.returned[id] = struct{}{}
		out = append(out, id)
	}
	t.sc.found = t.sc.found[:0]
	return out
}

// oldItemScan finds the output items' ids of a JSON answer (sse false) or of
// one event stream data line by following the nesting byte by byte, as a
// JSON reader takes the first member of a name. An escaped key where it
// reads names ends the scan (the ids read before it stand); an escaped or
// over-long id is not kept.
type oldItemScan struct {
	sse bool

	depth     int
	node      [maxItemDepth + 1]uint8 // the node at each depth; deeper ones are nNone
	seen      [maxItemDepth + 1]uint8 // the names read in the object at each depth (bits)
	inString  bool
	escaped   bool
	expectKey bool
	keying    bool
	key       []byte // the key being read, its first maxScanKey bytes
	keyLong   bool
	keyEsc    bool
	afterKey  bool
	next      uint8 // the node the next value is, if it opens as one
	want      uint8 // the cap* the next value is, if a string
	capture   uint8 // the cap* of the string being read into val
	val       []byte
	valBad    bool
	done      bool

	object uint8    // JSON: the answer's "object"
	found  []string // ids read, at most responses.MaxItems
}

// reset readies s for another data line, keeping its buffers and what it
// found.
func (s *oldItemScan) reset() {
	*s = oldItemScan{sse: s.sse, key: s.key[:0], val: s.val[:0], found: s.found}
}

func (s *oldItemScan) nodeAt(d int) uint8 {
	if d < 0 || d > maxItemDepth {
		return nNone
	}
	return s.node[d]
}

// member notes the key just read in the object at the current depth and
// sets what its value is.
func (s *oldItemScan) member() {
	if s.keyLong || s.depth > maxItemDepth {
		return
	}
	first := func(bit uint8) bool {
		was := s.seen[s.depth]&bit != 0
		s.seen[s.depth] |= bit
		return !was
	}
	switch k := string(s.key); s.node[s.depth] {
	case nRoot:
		switch {
		case k == "object" && first(1):
			s.want = capObject
		case k == "output" && first(2):
			s.next = nOutput
		}
	case nEvent:
		switch {
		case k == "item" && first(1):
			s.next = nItem
		case k == "response" && first(2):
			s.next = nResp
		}
	case nResp:
		if k == "output" && first(1) {
			s.next = nOutput
		}
	case nItem:
		if k == "id" && first(1) {
			s.want = capID
		}
	}
}

// scan takes the next bytes of the JSON text.
func (s *oldItemScan) scan(p []byte) {
	for i := 0; i < len(p) && !s.done; i++ {
		c := p[i]
		if s.inString {
			switch {
			case s.escaped:
				s.escaped = false
			case c == '\\':
				s.escaped = true
				s.keyEsc = s.keyEsc || s.keying
				s.valBad = s.valBad || s.capture != capNone
			case c == '"':
				s.inString = false
				if s.keying {
					s.keying, s.afterKey = false, true
				}
				if s.capture != capNone {
					s.keep()
				}
			default:
				// The rest of the string up to its end or next escape: kept
				// (a key's or an id's first bytes) or skipped.
				end := len(p)
				if j := bytes.IndexAny(p[i:], "\"\\"); j >= 0 {
					end = i + j
				}
				switch {
				case s.keying:
					s.key, s.keyLong = oldAppendMax(s.key, p[i:end], maxScanKey, s.keyLong)
				case s.capture != capNone:
					s.val, s.valBad = oldAppendMax(s.val, p[i:end], maxScanValue, s.valBad)
				}
				i = end - 1
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			s.inString = true
			switch {
			case s.expectKey && keyed(s.nodeAt(s.depth)):
				s.expectKey, s.keying, s.keyLong, s.keyEsc = false, true, false, false
				s.key = s.key[:0]
			case s.want != capNone:
				s.capture, s.valBad = s.want, false
				s.val = s.val[:0]
			}
		case ':':
			if s.afterKey {
				s.afterKey = false
				if s.keyEsc {
					s.done = true // it may spell a name read here: give up
					return
				}
				s.member()
				continue
			}
		case ',':
			if keyed(s.nodeAt(s.depth)) {
				s.expectKey = true
			}
		case '{', '[':
			child := nNone
			switch {
			case s.depth == 0 && c != '{':
				s.done = true // not an object
				return
			case s.depth == 0 && s.sse:
				child = nEvent
			case s.depth == 0:
				child = nRoot
			case s.nodeAt(s.depth) == nOutput && c == '{':
				child = nItem
			case s.next == nOutput && c == '[':
				child = nOutput
			case (s.next == nItem || s.next == nResp) && c == '{':
				child = s.next
			}
			s.depth++
			if s.depth <= maxItemDepth {
				s.node[s.depth], s.seen[s.depth] = child, 0
			}
			s.expectKey = c == '{' && keyed(child)
		case '}', ']':
			if s.depth <= 1 {
				s.done = true // the object read ended
				return
			}
			s.depth--
			s.expectKey = false
		}
		if s.want == capObject && s.capture == capNone && s.object == objUnknown {
			s.object = objOther // "object" is not a string
		}
		s.next, s.want = nNone, capNone
	}
}

// keep ends the string value being read.
func (s *oldItemScan) keep() {
	what := s.capture
	s.capture = capNone
	switch {
	case what == capObject:
		s.object = objOther
		if !s.valBad && string(s.val) == "response" {
			s.object = objResponse
		}
	case s.valBad || len(s.val) == 0 || len(s.found) >= responses.MaxItems:
	default:
		s.found = append(s.found, string(s.val))
	}
}

// oldAppendMax appends p to b up to limit bytes; over is true (or was) when p
// did not fit.
func oldAppendMax(b, p []byte, limit int, over bool) ([]byte, bool) {
	if room := limit - len(b); len(p) > room {
		return append(b, p[:room]...), true
	}
	return append(b, p...), over
}
