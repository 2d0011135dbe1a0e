package proxy

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/responses"
)

// A Responses API request passed through to a provider (a model whose
// provider serves the API natively, or an unconfigured model passed
// through) is stored by the provider under the gateway's one account,
// where every tenant's responses sit side by side. The gateway records
// which tenant created each (Runtime.ResponseOwners, from the answer as it
// is copied: ownerTap) and lets only that tenant name it: in a request's
// previous_response_id, or in a pass-through path /v1/responses/{id}/….
// Any other id is answered as an unknown stored response is (404
// response_not_found) before anything goes upstream.

// responsesCollections are the sub-paths of /v1/responses that name no
// response (their bodies are checked instead).
var responsesCollections = map[string]bool{"input_tokens": true, "compact": true}

// underResponses reports whether path is /v1/responses or under it, in any
// case (a lenient upstream matches paths without regard to case).
func underResponses(path string) bool {
	n := len(responsesRoute)
	return len(path) >= n && strings.EqualFold(path[:n], responsesRoute) && (len(path) == n || path[n] == '/')
}

// pathResponseID returns the response id a pass-through path names
// (/v1/responses/{id} and its sub-paths); ok is false for any other path.
// A collection's name is one only as the last segment: with more after it
// (/v1/responses/compact/…) it is an id, as far as a provider can tell.
func pathResponseID(path string) (id string, ok bool) {
	if !underResponses(path) || len(path) == len(responsesRoute) {
		return "", false
	}
	id, _, more := strings.Cut(path[len(responsesRoute)+1:], "/")
	return id, more || !responsesCollections[id]
}

// answersResponse reports whether a pass-through request of path answers
// with the response its path names (checkOwnedPath found it tenant's),
// whose output items are then tenant's too: GET /v1/responses/{id} (as
// JSON or a stream) and POST /v1/responses/{id}/cancel.
func answersResponse(path string, get, post bool) bool {
	if _, ok := pathResponseID(path); !ok {
		return false
	}
	_, sub, _ := strings.Cut(path[len(responsesRoute)+1:], "/")
	return (get && sub == "") || (post && strings.EqualFold(sub, "cancel"))
}

// checkOwnedPath refuses a pass-through path naming a provider response
// that tenant did not create, as an unknown stored response is refused.
func (s *Server) checkOwnedPath(rt *Runtime, tenant, path string) error {
	id, ok := pathResponseID(path)
	if !ok || rt.ResponseOwners == nil {
		return nil
	}
	owns, err := s.owns(rt.ResponseOwners, tenant, id)
	if err != nil || owns {
		return err
	}
	return pipeline.NotFound(pipeline.CodeResponseNotFound, "Response with id '%s' not found.", truncate(id, 128))
}

// checkOwnedBody refuses a pass-through Responses body whose
// previous_response_id names a provider response tenant did not create,
// as a translated request naming an unknown stored response is refused
// (handleResponses), or whose input names a stored item no answer of
// tenant's carried (checkOwnedItems). A conversation (the Conversations
// API) is refused: conversations are not scoped by tenant. body is valid
// JSON (jsonModel).
func (s *Server) checkOwnedBody(rt *Runtime, tenant string, body []byte) error {
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil
	}
	m, err := onlyMembers(root, "conversation", "previous_response_id", "input")
	if err != nil {
		return err
	}
	conv, prev := m[0], m[1]
	if conv.Exists() && conv.Type != gjson.Null {
		return pipeline.BadRequest("conversation", "conversation is not supported through this gateway; continue a response with previous_response_id instead.")
	}
	switch {
	case !prev.Exists() || prev.Type == gjson.Null:
		return s.checkOwnedItems(rt, tenant, m[2])
	case prev.Type != gjson.String:
		return pipeline.BadRequest("previous_response_id", "previous_response_id must be a string")
	}
	owns, err := s.owns(rt.ResponseOwners, tenant, prev.Str)
	if err != nil {
		return err
	}
	if owns {
		return s.checkOwnedItems(rt, tenant, m[2])
	}
	e := pipeline.NotFound(pipeline.CodeResponseNotFound, "Previous response with id '%s' not found.", truncate(prev.Str, 128))
	e.Param = "previous_response_id"
	return e
}

// checkOwnedItems refuses an input naming by id a stored item that no
// answer of tenant's carried (itemTap), as an unknown item: an
// item_reference (whose type may be left out: any item with an id and no
// type), or a reasoning item without its encrypted_content, both of which
// the provider reads from every tenant's items alike. At most
// responses.MaxItems are looked up, in one call.
func (s *Server) checkOwnedItems(rt *Runtime, tenant string, input gjson.Result) error {
	if !input.IsArray() {
		return nil
	}
	var ids []string
	var bad error
	i := -1
	input.ForEach(func(_, it gjson.Result) bool {
		i++
		if !it.IsObject() {
			return true
		}
		m, name := members(it, "type", "id", "encrypted_content")
		if name != "" {
			bad = pipeline.BadRequest("input", "input[%d].%s must appear once", i, name)
			return false
		}
		typ, id, enc := m[0], m[1], m[2]
		if !id.Exists() || id.Type == gjson.Null {
			return true
		}
		switch {
		case typ.Exists() && typ.Type != gjson.Null && typ.Type != gjson.String:
			bad = pipeline.BadRequest("input", "input[%d].type must be a string", i)
			return false
		case !typ.Exists() || typ.Type == gjson.Null || strings.EqualFold(typ.Str, "item_reference"):
		case strings.EqualFold(typ.Str, "reasoning") && enc.Str == "":
		default:
			return true // the item is what the request says
		}
		switch {
		case id.Type != gjson.String:
			bad = pipeline.BadRequest("input", "input[%d].id must be a string", i)
			return false
		case len(ids) == responses.MaxItems:
			bad = pipeline.BadRequest("input", "input may name at most %d stored items by id", responses.MaxItems)
			return false
		}
		ids = append(ids, id.Str)
		return true
	})
	if bad != nil || len(ids) == 0 {
		return bad
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
	defer cancel()
	missing, ok, err := rt.ResponseOwners.OwnsItems(ctx, tenant, ids)
	if err != nil {
		return responses.StoreUnavailable(err)
	}
	if ok {
		return nil
	}
	return pipeline.ItemNotFound(missing)
}

// owns looks up whether tenant created the provider's response id.
func (s *Server) owns(o *responses.Owners, tenant, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
	defer cancel()
	ok, err := o.Owns(ctx, tenant, id)
	if err != nil {
		return false, responses.StoreUnavailable(err)
	}
	return ok, nil
}

// onlyMembers returns root's members of the names given (at most three),
// in their order, in one pass over root. A second member of a name, or one
// spelled otherwise (another case, an escape), is refused: the gateway and
// a lenient upstream, which may match keys without regard to case and keep
// the last, must read the same one.
func onlyMembers(root gjson.Result, names ...string) ([3]gjson.Result, error) {
	vals, bad := members(root, names...)
	if bad != "" {
		return vals, pipeline.BadRequest(bad, "%s must appear once, spelt %q exactly (not in another case or with escapes)", bad, bad)
	}
	return vals, nil
}

// members is onlyMembers, with the name of the member refused ("" if none).
func members(root gjson.Result, names ...string) ([3]gjson.Result, string) {
	var vals [3]gjson.Result
	var seen [3]bool
	var bad string
	root.ForEach(func(k, v gjson.Result) bool {
		for i, name := range names {
			if !strings.EqualFold(k.Str, name) {
				continue
			}
			if seen[i] || len(k.Raw) != len(name)+2 || k.Raw[1:len(k.Raw)-1] != name {
				bad = name
				return false
			}
			seen[i], vals[i] = true, v
		}
		return true
	})
	return vals, bad
}

// refuseForm refuses a body other than JSON under /v1/responses: a lenient
// upstream may read one as JSON, or a form's fields as the request's, with
// a previous_response_id the gateway never judged.
func refuseForm(path string) error {
	return pipeline.Invalid(http.StatusUnsupportedMediaType, pipeline.CodeUnsupportedMediaType,
		"%s takes an application/json body.", truncate(path, 200))
}

// ownerRecord records, as a pass-through answer of POST /v1/responses is
// copied to the client, the response id it creates and its output items'
// ids as tenant's (or only the items', of a response read back: tap
// done). Used by the copy's one goroutine.
type ownerRecord struct {
	tap    *ownerTap
	items  *itemTap
	owners *responses.Owners
	tenant string
	held   []byte // bytes of a JSON answer from its id (or first item) on, until recorded
	spent  bool   // held outgrew maxOwnerHold: nothing more is held
}

// maxOwnerHold bounds what a JSON answer holds back from its id on while
// its object is not yet read: past it the bytes go out unrecorded, and the
// id is recorded when the object comes, still before the answer's end
// (the output items' ids are not: itemTap.spend).
const maxOwnerHold = 64 << 10

// pass takes the next bytes of the answer (end: the last) and returns
// those that may go out now, so that the client's follow-up, sent once it
// has read the id, finds the record on any replica: the id is recorded
// before the bytes that carry it. In a JSON answer, where the id is
// recorded only with its object "response", the bytes from the id's (or
// an output item's) on are held until the object is read (at most
// maxOwnerHold bytes). An
// event stream's lines go out whole (lineMasker) and hold nothing here.
// The result is p or the bytes held, which the caller relays before the
// next call.
func (r *ownerRecord) pass(s *Server, p []byte, end bool) []byte {
	if len(p) > 0 {
		r.write(s, p)
	}
	if !end && !r.spent && (r.tap.pending() || r.items.pending()) {
		if len(r.held)+len(p) <= maxOwnerHold {
			r.held = append(r.held, p...)
			return nil
		}
		r.spent = true
		r.items.spend()
	}
	if len(r.held) == 0 {
		return p
	}
	out := append(r.held, p...)
	r.held = nil
	return out
}

// write takes the next bytes of the answer, before the client gets them,
// and records the id once it is read, and the items' ids read in them.
func (r *ownerRecord) write(s *Server, p []byte) {
	id, ok := r.tap.write(p)
	items := r.items.write(p)
	if !ok && len(items) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(s.base, 5*time.Second)
	defer cancel()
	if ok {
		if err := r.owners.Record(ctx, r.tenant, id); err != nil {
			s.log.Warn().Str("response_id", id).AnErr("cause", err).Msg("could not record the owner of a provider's response")
		}
	}
	if len(items) > 0 {
		if err := r.owners.RecordItems(ctx, r.tenant, items); err != nil {
			s.log.Warn().Int("items", len(items)).AnErr("cause", err).Msg("could not record the owner of a provider's output items")
		}
	}
}

// ownerTap reads the id of the response a pass-through answer of POST
// /v1/responses creates: a JSON answer's top-level "id" when its "object"
// is "response"; an event stream's first data line with a "response.id"
// (response.created). It follows the bytes as they pass and keeps only a
// few of them, whatever the answer's size.
type ownerTap struct {
	sse  bool
	sc   idScan
	data dataLines // SSE
	done bool
}

// newOwnerTap returns a tap for an answer of contentType, or nil for an
// answer that is neither JSON nor an event stream.
func newOwnerTap(contentType []byte) *ownerTap {
	switch {
	case isEventStream(contentType):
		return &ownerTap{sse: true, sc: idScan{in: "response"}}
	case isJSON(contentType), len(bytes.TrimSpace(contentType)) == 0:
		return &ownerTap{}
	}
	return nil
}

// pending reports whether a JSON answer's id is being read or was read
// while its object is not yet known: its bytes must wait for the record.
func (o *ownerTap) pending() bool {
	return !o.sse && !o.done && (o.sc.hasID || o.sc.capture == wantID)
}

// write takes the next bytes of the answer; it returns the response id
// once, with the bytes that complete it.
func (o *ownerTap) write(p []byte) (string, bool) {
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
	for len(p) > 0 {
		data, rest, ended := o.data.cut(p)
		if o.sc.scan(data); o.sc.hasID {
			o.done = true
			return o.sc.id, true
		}
		if !ended {
			break
		}
		p = rest
		o.sc.reset()
	}
	return "", false
}

// dataLines follows an event stream's lines as they pass, for a scan of
// its data lines' values.
type dataLines struct {
	col  int  // bytes of the current line matched against "data:"
	skip bool // the current line is not a data line
}

// cut cuts p after its first line end, if it has one (ended): data is the
// bytes before it of a data line's value, rest the bytes after it.
func (d *dataLines) cut(p []byte) (data, rest []byte, ended bool) {
	const prefix = "data:"
	data = p
	i := bytes.IndexByte(p, '\n')
	if i >= 0 {
		data, rest = p[:i], p[i+1:]
	}
	if !d.skip && d.col < len(prefix) {
		n := min(len(prefix)-d.col, len(data))
		d.skip = string(data[:n]) != prefix[d.col:d.col+n]
		d.col += n
		data = data[n:]
	}
	if d.skip || d.col < len(prefix) {
		data = nil
	}
	if i >= 0 {
		d.col, d.skip = 0, false
	}
	return data, rest, i >= 0
}

// idScan finds the "id" and "object" string members of a JSON object (or
// of its member object named in: a Responses event's "response") by
// following the nesting byte by byte, as a JSON reader takes the first
// member of a name. An escaped key at those levels ends the scan with
// nothing found; an escaped or over-long value is not kept.
type idScan struct {
	in string

	lx        jsonLexer
	entered   bool // the object at depth 2 is the member named in
	seenIn    bool
	expectKey bool
	want      int // what the next value is (want*)
	capture   int // the want* whose string value is being read

	id, object       string
	hasID, hasObject bool
	seenID, seenObj  bool
	done             bool
}

const (
	wantNone = iota
	wantIn
	wantID
	wantObject
)

// maxScanKey bounds the key bytes idScan keeps: its longest name.
const maxScanKey = 16

// reset readies s for another object, keeping its buffers.
func (s *idScan) reset() {
	*s = idScan{in: s.in, lx: jsonLexer{buf: s.lx.buf[:0]}}
}

// keyLevel reports whether the object at the current depth has the
// members idScan reads: the top level's, or the member named in's.
func (s *idScan) keyLevel() bool {
	return s.lx.depth == 1 || (s.lx.depth == 2 && s.entered)
}

// member is what the value after the key just read is.
func (s *idScan) member() int {
	target := s.in == "" || s.lx.depth == 2
	switch k := string(s.lx.buf); {
	case s.lx.long:
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
func (s *idScan) scan(p []byte) {
	lx := &s.lx
	lx.p, lx.i = p, 0
	for !s.done {
		switch lx.next() {
		case lexEnd:
			return
		case lexString:
			switch {
			case s.expectKey && s.keyLevel():
				s.expectKey = false
				lx.readString(lexMember, maxScanKey)
			case s.want == wantID || s.want == wantObject:
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
			s.want = s.member()
			continue
		case lexComma:
			if s.keyLevel() {
				s.expectKey = true
			}
		case lexOpen:
			switch {
			case lx.depth == 1 && lx.c != '{':
				s.done = true // not an object
				return
			case s.want == wantIn && lx.c == '{':
				s.entered = true
			}
			if lx.c == '{' && s.keyLevel() {
				s.expectKey = true
			}
		case lexClose:
			if lx.depth < 1 || (s.entered && lx.depth == 1) {
				s.done = true // the object read ended
				return
			}
		}
		s.want = wantNone
	}
}

// maxScanValue bounds the id or object value idScan keeps; a longer one
// is not kept.
const maxScanValue = 128

// keep ends the string value being read.
func (s *idScan) keep() {
	what := s.capture
	s.capture = wantNone
	if s.lx.long || s.lx.esc || len(s.lx.buf) == 0 {
		return
	}
	switch what {
	case wantID:
		s.id, s.hasID = string(s.lx.buf), true
	case wantObject:
		s.object, s.hasObject = string(s.lx.buf), true
	}
	if s.hasID && (s.in != "" || s.hasObject) {
		s.done = true
	}
}
