package proxy

import "github.com/llmgw/gateway/responses"

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
	data    dataLines // SSE
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
	for len(p) > 0 {
		data, rest, ended := t.data.cut(p)
		if t.sc.scan(data); !ended {
			break
		}
		p = rest
		t.sc.reset()
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

	lx        jsonLexer
	node      [maxItemDepth + 1]uint8 // the node at each depth; deeper ones are nNone
	seen      [maxItemDepth + 1]uint8 // the names read in the object at each depth (bits)
	expectKey bool
	next      uint8 // the node the next value is, if it opens as one
	want      uint8 // the cap* the next value is, if a string
	capture   uint8 // the cap* of the string being read
	done      bool

	object uint8    // JSON: the answer's "object"
	found  []string // ids read, at most responses.MaxItems
}

// reset readies s for another data line, keeping its buffers and what it
// found.
func (s *itemScan) reset() {
	*s = itemScan{sse: s.sse, lx: jsonLexer{buf: s.lx.buf[:0]}, found: s.found}
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
	d := s.lx.depth
	if s.lx.long || d > maxItemDepth {
		return
	}
	first := func(bit uint8) bool {
		was := s.seen[d]&bit != 0
		s.seen[d] |= bit
		return !was
	}
	switch k := string(s.lx.buf); s.node[d] {
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
	lx := &s.lx
	lx.p, lx.i = p, 0
	for !s.done {
		switch lx.next() {
		case lexEnd:
			return
		case lexString:
			switch {
			case s.expectKey && keyed(s.nodeAt(lx.depth)):
				s.expectKey = false
				lx.readString(lexMember, maxScanKey)
			case s.want != capNone:
				if s.capture = s.want; lx.readString(lexValue, maxScanValue) {
					s.keep()
				}
			}
		case lexValue:
			s.keep()
			continue
		case lexMember:
			if lx.esc {
				s.done = true // it may spell a name read here: give up
				return
			}
			s.member()
			continue
		case lexComma:
			if keyed(s.nodeAt(lx.depth)) {
				s.expectKey = true
			}
		case lexOpen:
			d, c := lx.depth-1, lx.c // the depth the value opens at
			child := nNone
			switch {
			case d == 0 && c != '{':
				s.done = true // not an object
				return
			case d == 0 && s.sse:
				child = nEvent
			case d == 0:
				child = nRoot
			case s.nodeAt(d) == nOutput && c == '{':
				child = nItem
			case s.next == nOutput && c == '[':
				child = nOutput
			case (s.next == nItem || s.next == nResp) && c == '{':
				child = s.next
			}
			if d+1 <= maxItemDepth {
				s.node[d+1], s.seen[d+1] = child, 0
			}
			s.expectKey = c == '{' && keyed(child)
		case lexClose:
			if lx.depth < 1 {
				s.done = true // the object read ended
				return
			}
			s.expectKey = false
		}
		if s.want == capObject && s.capture == capNone && s.object == objUnknown {
			s.object = objOther // "object" is not a string
		}
		s.next, s.want = nNone, capNone
	}
}

// keep ends the string value being read.
func (s *itemScan) keep() {
	what := s.capture
	s.capture = capNone
	switch {
	case what == capObject:
		s.object = objOther
		if !s.lx.long && !s.lx.esc && string(s.lx.buf) == "response" {
			s.object = objResponse
		}
	case s.lx.long || s.lx.esc || len(s.lx.buf) == 0 || len(s.found) >= responses.MaxItems:
	default:
		s.found = append(s.found, string(s.lx.buf))
	}
}
