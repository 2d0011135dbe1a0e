package proxy

import (
	"bytes"

	"github.com/llmgw/gateway/responses"
)

// A pass-through Responses answer's output items (messages, reasoning,
// tool calls) are stored by the provider beside every other tenant's, and
// a later request may name one by id: an item_reference, or a reasoning
// item without its encrypted_content. The gateway records the ids of the
// output items of a tenant's answers as it copies them (itemTap, beside
// ownerTap) and lets only that tenant name them (checkOwnedItems).

// itemTap reads the ids of a pass-through Responses answer's output
// items: a JSON answer's top-level "output"[]."id" when its "object" is
// "response"; an event stream's data lines' "item"."id" (the
// response.output_item.* events) and "response"."output"[]."id". Each id
// is returned once, at most responses.MaxItems of them; the rest are not
// recorded. It keeps a few bytes, whatever the answer's size.
type itemTap struct {
	sse     bool
	sc      itemScan
	col     int  // SSE: bytes of the current line matched against "data:"
	skip    bool // SSE: the current line is not a data line
	stopped bool
	// spent: a JSON answer's bytes went out before its object was known
	// (spend); ids read while it is still unknown go out unrecorded, so
	// they are dropped, and those read once it is known are recorded.
	spent    bool
	returned map[string]struct{}
}

func newItemTap(sse bool) *itemTap {
	return &itemTap{sse: sse, sc: itemScan{sse: sse}, returned: map[string]struct{}{}}
}

// pending reports whether a JSON answer's item ids were read while its
// object is not yet known: its bytes must wait for the record.
func (t *itemTap) pending() bool {
	return !t.sse && !t.stopped && t.sc.object == objUnknown && (len(t.sc.found) > 0 || t.sc.capture == capID)
}

// spend is told that a JSON answer's bytes go out without waiting for its
// object: the ids they carried, and any read until the object is known,
// are not recorded (never after the client has them); those read after a
// "response" object are.
func (t *itemTap) spend() {
	if !t.sse && t.sc.object == objUnknown {
		t.spent = true
		t.sc.found = t.sc.found[:0]
	}
}

// write takes the next bytes of the answer and returns the item ids read
// in them (or held until now) that are to be recorded before they go out.
func (t *itemTap) write(p []byte) []string {
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
func (t *itemTap) take() []string {
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

// The nodes of an answer itemScan follows; any other is nNone.
const (
	nNone   uint8 = iota
	nRoot         // a JSON answer: the response object
	nEvent        // an event stream's data line: the event object
	nResp         // an event's "response"
	nOutput       // a response's "output" array
	nItem         // an output item, or an event's "item"
)

// What a string value itemScan reads is.
const (
	capNone uint8 = iota
	capID
	capObject
)

// A JSON answer's "object", as far as itemScan read it.
const (
	objUnknown uint8 = iota
	objResponse
	objOther
)

// maxItemDepth is the deepest node itemScan follows: an event's
// response.output[] item.
const maxItemDepth = 4

// itemScan finds the output items' ids of a JSON answer (sse false) or of
// one event stream data line by following the nesting byte by byte, as a
// JSON reader takes the first member of a name. An escaped key where it
// reads names ends the scan (the ids read before it stand); an escaped or
// over-long id is not kept.
type itemScan struct {
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
func (s *itemScan) reset() {
	*s = itemScan{sse: s.sse, key: s.key[:0], val: s.val[:0], found: s.found}
}

func (s *itemScan) nodeAt(d int) uint8 {
	if d < 0 || d > maxItemDepth {
		return nNone
	}
	return s.node[d]
}

func keyed(n uint8) bool { return n == nRoot || n == nEvent || n == nResp || n == nItem }

// member notes the key just read in the object at the current depth and
// sets what its value is.
func (s *itemScan) member() {
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
func (s *itemScan) scan(p []byte) {
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
					s.key, s.keyLong = appendMax(s.key, p[i:end], maxScanKey, s.keyLong)
				case s.capture != capNone:
					s.val, s.valBad = appendMax(s.val, p[i:end], maxScanValue, s.valBad)
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

// appendMax appends p to b up to limit bytes; over is true (or was) when p
// did not fit.
func appendMax(b, p []byte, limit int, over bool) ([]byte, bool) {
	if room := limit - len(b); len(p) > room {
		return append(b, p[:room]...), true
	}
	return append(b, p...), over
}

// keep ends the string value being read.
func (s *itemScan) keep() {
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
