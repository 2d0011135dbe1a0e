package toolloop

import (
	"crypto/rand"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"
)

// newCallID returns an unguessable tool-call id: "call_" and 26 characters
// of base32 (130 random bits, as rand.Text makes them), in one allocation.
func newCallID() string {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	var b [5 + 26]byte
	copy(b[:], "call_")
	rand.Read(b[5:])
	for i := 5; i < len(b); i++ {
		b[i] = alphabet[b[i]%32]
	}
	return string(b[:])
}

// call is one tool call of a model turn, accumulated from stream deltas or
// read whole from a non-stream message. The loop owns it; nothing is shared.
type call struct {
	upIndex int    // the upstream's index (or the position for whole calls)
	id      string // the id the client and the history see; may be empty until a delta carries it
	upID    string // the upstream's id, used only to match deltas
	name    string
	args    []byte // unescaped arguments JSON text, concatenated
	kind    callKind

	nameB *strings.Builder // a name sent in several fragments, concatenated in place (name is its String)
	scan  argScan          // whether args are complete (stream.go)

	// re-streaming state of a client call (stream.go)
	outIndex   int
	headerSent bool
	emitted    int  // bytes of args already sent to the client
	closed     bool // no more fragments will be sent for this call
}

// assignID gives c the id the client and the history see, once: with
// gateway (server tools in play, docs/wire.md rule 11) an unguessable id of
// the gateway's own, since the client's follow-up is matched to hidden state
// by it and an upstream's ids may be short, sequential or reused across
// conversations; else the upstream's, when a delta has carried it. The
// stream's accumulator and the JSON loop both name calls here, so that the
// two forms of a response show the same kind of id.
func (c *call) assignID(gateway bool) {
	switch {
	case c.id != "":
	case gateway:
		c.id = newCallID()
	default:
		c.id = c.upID
	}
}

// appendToolCalls appends calls as a tool_calls array of complete calls (a
// message's, or with indexed, a chunk delta's with each call's position).
func appendToolCalls(dst []byte, calls []*call, indexed bool) []byte {
	dst = append(dst, '[')
	for i, c := range calls {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '{')
		if indexed {
			dst = append(dst, `"index":`...)
			dst = strconv.AppendInt(dst, int64(i), 10)
			dst = append(dst, ',')
		}
		dst = append(dst, `"id":`...)
		dst = appendJSONString(dst, []byte(c.id))
		dst = append(dst, `,"type":"function","function":{"name":`...)
		dst = appendJSONString(dst, []byte(c.name))
		dst = append(dst, `,"arguments":`...)
		dst = appendJSONString(dst, c.args)
		dst = append(dst, "}}"...)
	}
	return append(dst, ']')
}

type callKind uint8

const (
	kindUnknown callKind = iota // not classified yet (name may still grow)
	kindClient
	kindServer
)

// accumulator merges tool-call deltas by index, in order of first appearance.
// It never panics on any input: entries that are not objects are ignored, a
// missing index continues the last call unless a new id starts a new one, a
// new id at an index already in use starts a new call too, a negative index
// counts as 0 (a Bedrock quirk), and at most maxCalls calls are tracked (more fail the round: see overflow). Not safe for concurrent use.
type accumulator struct {
	calls   []*call
	ignored int // deltas dropped (over maxCalls, not an object, or far)
	// overflow: a delta's index was past maxCallIndex, or it started a call
	// past maxCalls. Its call is dropped, and the loop fails the round
	// (upstream_malformed) rather than answer without the call.
	overflow bool
	size     int // bytes kept of the calls' upstream ids, names and arguments (see maxRoundBytes)

	// gatewayIDs gives every call an id of the gateway's own instead of
	// the upstream's (see call.assignID and session.gatewayIDs).
	gatewayIDs bool
}

const maxCalls = 128

// maxCallIndex is the largest tool-call index the accumulator takes.
const maxCallIndex = 1 << 20

func (a *accumulator) reset() {
	a.calls = a.calls[:0]
	a.ignored, a.size, a.overflow = 0, 0, false
}

// add merges one tool_calls[] entry and returns the call it touched, or nil.
// fragment reports whether the entry carried a non-empty arguments fragment.
func (a *accumulator) add(e gjson.Result) (c *call, fragment bool) {
	if !e.IsObject() {
		a.ignored++
		return nil, false
	}
	var idx, id, name, args gjson.Result
	e.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "index":
			idx = v
		case "id":
			id = v
		case "function":
			if v.IsObject() {
				name = v.Get("name")
				args = v.Get("arguments")
			}
		}
		return true
	})
	idStr := ""
	if id.Type == gjson.String {
		idStr = id.Str
	}
	switch {
	case idx.Type == gjson.Number:
		i := idx.Int()
		if i < 0 {
			i = 0
		}
		if i > maxCallIndex {
			a.ignored++
			a.overflow = true
			return nil, false
		}
		c = a.byIndex(int(i))
		if c != nil && idStr != "" && c.upID != "" && idStr != c.upID {
			// A new id at an index in use: some upstreams send every
			// parallel call at index 0. It is a call of its own, and
			// takes the index over for the fragments that follow.
			c = a.newCall(int(i))
		}
	case len(a.calls) > 0 && (idStr == "" || idStr == a.calls[len(a.calls)-1].upID):
		c = a.calls[len(a.calls)-1]
	default:
		c = a.byIndex(a.nextFreeIndex())
	}
	if c == nil {
		a.ignored++
		return nil, false
	}
	if idStr != "" && c.upID == "" {
		// Copies: a string of the chunk would keep the whole chunk alive.
		idStr = strings.Clone(idStr)
		c.upID = idStr
		a.size += len(idStr)
	}
	c.assignID(a.gatewayIDs)
	if name.Type == gjson.String && name.Str != "" && len(c.args) == 0 {
		// A complete name repeated in a later delta (some upstreams do) is
		// not appended twice; a name split across deltas is concatenated.
		// Once arguments have started the name is settled (the stream has
		// classified the call and may have shown its header): later name
		// text is ignored.
		if c.name != name.Str {
			a.appendName(c, name.Str)
		}
	}
	switch args.Type {
	case gjson.String:
		if s := args.String(); s != "" {
			c.args = append(c.args, s...)
			a.size += len(s)
			fragment = true
		}
	case gjson.JSON:
		// Some upstreams send the arguments as an object, not a string.
		c.args = append(c.args, args.Raw...)
		a.size += len(args.Raw)
		fragment = true
	}
	return c, fragment
}

// appendName appends a fragment to c's name. The first is copied (a string
// of the chunk would keep the whole chunk alive); later ones go to a
// builder, so that a name sent in many fragments costs the bytes it has,
// not a copy of the whole name per fragment.
func (a *accumulator) appendName(c *call, frag string) {
	a.size += len(frag)
	if c.name == "" {
		c.name = strings.Clone(frag)
		return
	}
	if c.nameB == nil {
		c.nameB = new(strings.Builder)
		c.nameB.WriteString(c.name)
	}
	c.nameB.WriteString(frag)
	c.name = c.nameB.String()
}

// byIndex returns the call at upstream index i, the last one started there,
// or a new one.
func (a *accumulator) byIndex(i int) *call {
	for j := len(a.calls) - 1; j >= 0; j-- {
		if a.calls[j].upIndex == i {
			return a.calls[j]
		}
	}
	return a.newCall(i)
}

// newCall starts a call at upstream index i; nil past maxCalls.
func (a *accumulator) newCall(i int) *call {
	if len(a.calls) >= maxCalls {
		a.overflow = true
		return nil
	}
	c := &call{upIndex: i}
	a.calls = append(a.calls, c)
	return c
}

func (a *accumulator) nextFreeIndex() int {
	n := 0
	for _, c := range a.calls {
		if c.upIndex >= n {
			n = c.upIndex + 1
		}
	}
	return n
}

// callsFromMessage reads message.tool_calls of a non-stream turn: up to
// maxCalls+1 calls, so that the caller can tell a round that made too many
// (see errCallOverflow).
func callsFromMessage(tc gjson.Result, gatewayIDs bool) []*call {
	if !tc.IsArray() {
		return nil
	}
	var calls []*call
	tc.ForEach(func(_, v gjson.Result) bool {
		if len(calls) > maxCalls || !v.IsObject() {
			return len(calls) <= maxCalls
		}
		// One pass over the entry, finding what the paths id,
		// function.name and function.arguments find (see completionView).
		var id, name, args gjson.Result
		v.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "id":
				keepFirst(&id, v)
			case "function":
				if v.IsObject() {
					v.ForEach(func(k, v gjson.Result) bool {
						switch k.Str {
						case "name":
							keepFirst(&name, v)
						case "arguments":
							keepFirst(&args, v)
						}
						return true
					})
				}
			}
			return true
		})
		c := &call{upIndex: len(calls), upID: id.String(), name: name.String()}
		c.assignID(gatewayIDs)
		if args.Type == gjson.String {
			c.args = []byte(args.String())
		} else if args.Exists() && args.Type != gjson.Null { // null: none, as a stream's delta
			c.args = []byte(args.Raw)
		}
		calls = append(calls, c)
		return true
	})
	return calls
}
