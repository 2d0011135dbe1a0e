package responses

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
)

// KV is where stored responses live: the response cache's memory or Redis
// store. Implementations are safe for concurrent use.
type KV interface {
	caching.Store
	Delete(ctx context.Context, key string) error
}

// Store keeps responses made with store on, scoped to the tenant that made
// them, so that a follow-up (previous_response_id), a GET or a DELETE may
// land on any replica sharing the KV. A stored record is one JSON document:
// {"response":{…},"input":[…],"history":[…]}.
type Store struct {
	KV       KV
	TTL      time.Duration // how long a response is kept; <= 0 forever
	MaxBytes int           // a record larger than this is not stored
}

// Record is a stored response as read back.
type Record struct {
	Response gjson.Result // the response object
	Input    gjson.Result // the input items
	History  gjson.Result // the conversation as chat messages, the answer included
}

func key(tenant, id string) string { return "resp:" + tenant + "\x00" + id }

// Load returns the response id stored for tenant; ok is false when there
// is none (never stored, expired, deleted, another tenant's, or over
// MaxBytes: never read whole from a KV that bounds its reads).
func (s *Store) Load(ctx context.Context, tenant, id string) (Record, bool, error) {
	if !strings.HasPrefix(id, "resp_") || len(id) > 128 {
		return Record{}, false, nil
	}
	b, ok, err := s.get(ctx, key(tenant, id))
	if err != nil || !ok || (s.MaxBytes > 0 && len(b) > s.MaxBytes) || !jsonvalid.Bytes(b) {
		return Record{}, false, err
	}
	r := gjson.GetManyBytes(b, "response", "input", "history")
	return Record{Response: r[0], Input: r[1], History: r[2]}, true, nil
}

// boundedKV is a KV that can refuse a value over a bound without reading it
// (caching.RedisStore).
type boundedKV interface {
	GetMax(ctx context.Context, key string, limit int) ([]byte, bool, error)
}

// get reads the record under k, bounded by MaxBytes when the KV can bound
// its reads: Save never writes a larger record, so a larger value (a shared
// or compromised store) is a miss, not an allocation of its size.
func (s *Store) get(ctx context.Context, k string) ([]byte, bool, error) {
	if b, ok := s.KV.(boundedKV); ok && s.MaxBytes > 0 {
		return b.GetMax(ctx, k, s.MaxBytes)
	}
	return s.KV.Get(ctx, k)
}

// Save stores a finished response. history is the conversation as chat
// messages before this response; answer is the messages the response adds
// (AnswerMessages: comma-separated, empty for none). It reports whether
// the record fit: under MaxBytes and, in a MemoryKV, under its bound.
func (s *Store) Save(ctx context.Context, tenant, id string, object, input, history, answer []byte) (bool, error) {
	n := len(object) + len(input) + len(history) + len(answer) + 48
	if s.MaxBytes > 0 && n > s.MaxBytes {
		return false, nil
	}
	b := make([]byte, 0, n)
	b = append(b, `{"response":`...)
	b = append(b, object...)
	b = append(b, `,"input":`...)
	b = append(b, input...)
	b = append(b, `,"history":`...)
	switch {
	case len(answer) == 0:
		b = append(b, history...)
	case len(history) <= 2:
		b = append(b, '[')
		b = append(b, answer...)
		b = append(b, ']')
	default:
		b = append(b, history[:len(history)-1]...)
		b = append(b, ',')
		b = append(b, answer...)
		b = append(b, ']')
	}
	b = append(b, '}')
	switch err := s.KV.Set(ctx, key(tenant, id), b, s.TTL); {
	case errors.Is(err, ErrTooLarge):
		return false, nil
	case err != nil:
		return false, err
	}
	// An output item whose id names no response (an mcp_approval_request's
	// id is its call's approval id) is found through an index entry, so
	// that a client's item_reference to it resolves (the AI SDK sends the
	// request it answers so with store on). Best effort: the response is
	// stored whatever becomes of it.
	for _, item := range heldItems(object, id) {
		_ = s.KV.Set(ctx, heldByKey(tenant, item), []byte(id), s.TTL)
	}
	return true, nil
}

// heldItems returns the ids of the output items of object (the response
// id) that name no response: its mcp_approval_requests' (call_ ids).
func heldItems(object []byte, id string) []string {
	if !bytes.Contains(object, []byte(`"mcp_approval_request"`)) {
		return nil
	}
	var out []string
	gjson.GetBytes(object, "output").ForEach(func(_, it gjson.Result) bool {
		if v := it.Get("id").Str; it.Get("type").Str == "mcp_approval_request" && strings.HasPrefix(v, heldPrefix) && itemResponse(v) != id {
			out = append(out, v)
		}
		return true
	})
	return out
}

// heldPrefix starts the ids of the items that name no response (the
// approval ids of calls awaiting approval): only those are looked up in the
// index, so other unknown ids cost no read.
const heldPrefix = "call_"

// heldByKey is the index entry naming the response that holds an output
// item whose id does not (Save).
func heldByKey(tenant, itemID string) string { return "respitem:" + tenant + "\x00" + itemID }

// Delete removes the response id stored for tenant, reporting whether it
// was there.
func (s *Store) Delete(ctx context.Context, tenant, id string) (bool, error) {
	rec, ok, err := s.Load(ctx, tenant, id)
	if err != nil || !ok {
		return false, err
	}
	for _, item := range heldItems([]byte(rec.Response.Raw), id) {
		_ = s.KV.Delete(ctx, heldByKey(tenant, item)) // best effort: it names a response no longer there
	}
	return true, s.KV.Delete(ctx, key(tenant, id))
}

// Resolver returns the item resolver of tenant's stored responses: an
// output item id this gateway minted ("msg_<x>_<n>", "fc_<x>_<n>"…)
// names the response "resp_<x>" that holds it, and so does the id
// input_items lists for an input item that had none ("in_<x>_<n>", the
// n-th input item).
//
// A request's references load each stored response once, and at most
// maxReferenced of them, index entries included: a body full of
// references must not become as many store reads.
func (s *Store) Resolver(ctx context.Context, tenant string) Resolver {
	loaded := map[string]*Record{} // nil: not stored
	reads := 0                     // responses loaded
	heldReads := 0                 // index entries read (heldByKey): an approval request's, one each
	find := func(id, itemID string) (gjson.Result, error) {
		if id == "" {
			return gjson.Result{}, nil
		}
		rec, seen := loaded[id]
		if !seen {
			if reads >= maxReferenced {
				return gjson.Result{}, ErrTooManyReferenced
			}
			reads++
			r, ok, err := s.Load(ctx, tenant, id)
			if err != nil {
				return gjson.Result{}, err
			}
			if ok {
				rec = &r
			}
			loaded[id] = rec
		}
		if rec == nil {
			return gjson.Result{}, nil
		}
		var found gjson.Result
		if strings.HasPrefix(itemID, "in_") {
			// Only the number as input_items writes it names the item: an
			// alias ("_00", "_+0") would pass the request's each-item-once
			// check as another id and expand the same item again.
			num := itemID[strings.LastIndexByte(itemID, '_')+1:]
			n, err := strconv.Atoi(num)
			if err != nil || n < 0 || strconv.Itoa(n) != num {
				return found, nil
			}
			k := 0
			rec.Input.ForEach(func(_, it gjson.Result) bool {
				if k == n && !it.Get("id").Exists() {
					found = it // InputList's id for it
				}
				k++
				return k <= n
			})
			return found, nil
		}
		rec.Response.Get("output").ForEach(func(_, it gjson.Result) bool {
			if it.Get("id").Str == itemID {
				found = it
				return false
			}
			return true
		})
		return found, nil
	}
	return func(itemID string) (gjson.Result, error) {
		if !strings.HasPrefix(itemID, heldPrefix) {
			return find(itemResponse(itemID), itemID)
		}
		if heldReads >= maxHeldReads {
			return gjson.Result{}, ErrTooManyReferenced
		}
		heldReads++
		var b []byte
		var ok bool
		var err error
		if bk, bounded := s.KV.(boundedKV); bounded {
			b, ok, err = bk.GetMax(ctx, heldByKey(tenant, itemID), 160) // a response id, never more
		} else {
			b, ok, err = s.KV.Get(ctx, heldByKey(tenant, itemID))
		}
		if err != nil {
			return gjson.Result{}, err
		}
		if ok && len(b) <= 128 && strings.HasPrefix(string(b), "resp_") {
			return find(string(b), itemID)
		}
		return gjson.Result{}, nil
	}
}

// maxHeldReads bounds the index entries one request's references read
// (heldByKey: an approval request's, one per request answered): a response
// may hold many, and each is one small read.
const maxHeldReads = 128

// maxReferenced bounds the stored responses one request's item references
// may load.
const maxReferenced = 16

// AnswerMessages is the chat messages a response object's output adds to
// the conversation, comma-separated (a JSON array's members): its
// messages, its client calls, and each tool the gateway ran (an mcp_call)
// as a call and its result, in output order, so that a follow-up's model
// sees what the response's model saw. Reasoning is left out.
func AnswerMessages(object []byte) []byte {
	h := history{open: -1, settled: true}
	gjson.GetBytes(object, "output").ForEach(func(_, it gjson.Result) bool {
		_ = h.item(it, "output") // an output item of ours is never refused
		return true
	})
	a := h.array()
	return a[1 : len(a)-1]
}

// Settle returns msgs (a history: a JSON array of chat messages) with the
// tool message answering each call of settled (by its id) holding what the
// model was shown there instead of the person's decision: the run's result,
// a rejection, the person's answer. A stored history is then whole on its
// own, where the decision could be settled only while the tool loop still
// keeps the approval (tool_loop.state_ttl), and AnswerMessages leaves an
// approved run out. msgs itself when settled is empty.
func Settle(msgs []byte, settled map[string]string) []byte {
	if len(settled) == 0 {
		return msgs
	}
	b := []byte{'['}
	gjson.ParseBytes(msgs).ForEach(func(_, m gjson.Result) bool {
		if len(b) > 1 {
			b = append(b, ',')
		}
		if out, ok := settled[m.Get("tool_call_id").Str]; ok && m.Get("role").Str == "tool" {
			b = append(b, toolResult(m.Get("tool_call_id").Str, out)...)
		} else {
			b = append(b, m.Raw...)
		}
		return true
	})
	return append(b, ']')
}

// InputPage is the page of input items a GET of input_items asks for.
type InputPage struct {
	Limit int    // items on the page, 1 to 100; 0 is the default, 20
	Asc   bool   // oldest first; the default order is newest first
	After string // the page starts after the item with this id
}

// InputList is the body of GET /v1/responses/{id}/input_items: page p of
// the stored input items, each given an id when it had none.
func InputList(responseID string, input gjson.Result, p InputPage) []byte {
	type entry struct {
		id string
		it gjson.Result
	}
	var items []entry
	input.ForEach(func(_, it gjson.Result) bool {
		id := it.Get("id").String()
		if id == "" {
			id = "in_" + strings.TrimPrefix(responseID, "resp_") + "_" + strconv.Itoa(len(items))
		}
		items = append(items, entry{id, it})
		return true
	})
	if !p.Asc {
		slices.Reverse(items)
	}
	if p.After != "" {
		i := slices.IndexFunc(items, func(e entry) bool { return e.id == p.After })
		if i < 0 {
			items = nil // an id not listed: nothing after it
		} else {
			items = items[i+1:]
		}
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 20
	}
	more := len(items) > limit
	if more {
		items = items[:limit]
	}
	b := []byte(`{"object":"list","data":[`)
	for i, e := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendInputItem(b, e.it, e.id)
	}
	var first, last string
	if len(items) > 0 {
		first, last = items[0].id, items[len(items)-1].id
	}
	b = append(b, `],"first_id":`...)
	b = jsonstring.Append(b, first)
	b = append(b, `,"last_id":`...)
	b = jsonstring.Append(b, last)
	b = append(b, `,"has_more":`...)
	b = strconv.AppendBool(b, more)
	return append(b, '}')
}

// appendInputItem appends a stored input item as input_items lists it:
// with its id, a call's or call output's status, and a message's content
// as the parts of an input message (user, system, developer) or of an
// output message (assistant).
func appendInputItem(b []byte, it gjson.Result, id string) []byte {
	b = append(b, `{"id":`...)
	b = jsonstring.Append(b, id)
	typ := it.Get("type").String()
	if typ != "" && typ != "message" {
		status := it.Get("status").Type == gjson.String
		if !status && (typ == "function_call" || typ == "function_call_output") {
			b = append(b, `,"status":"completed"`...)
		}
		b = appendMembers(b, it, func(k string) bool { return k != "id" && (k != "status" || status) })
		return append(b, '}')
	}
	role := it.Get("role").String()
	b = append(b, `,"type":"message","status":"completed","role":`...)
	b = jsonstring.Append(b, role)
	b = append(b, `,"content":[`...)
	c := it.Get("content")
	if c.Type == gjson.String {
		b = appendInputPart(b, role, "", c.Str, gjson.Result{})
	} else {
		n := 0
		c.ForEach(func(_, p gjson.Result) bool {
			if n > 0 {
				b = append(b, ',')
			}
			n++
			b = appendInputPart(b, role, p.Get("type").String(), p.Get("text").String(), p)
			return true
		})
	}
	return append(b, "]}"...)
}

// appendInputPart appends a content part of an input message of role: an
// assistant's text is output_text (with its annotations and logprobs,
// empty when it had none) or a refusal; another role's text is input_text,
// and its images have a detail.
func appendInputPart(b []byte, role, typ, text string, p gjson.Result) []byte {
	switch {
	case role == "assistant" && typ == "refusal":
		b = append(b, `{"type":"refusal","refusal":`...)
		b = jsonstring.Append(b, p.Get("refusal").String())
		return append(b, '}')
	case role == "assistant":
		b = append(b, `{"type":"output_text","text":`...)
		b = jsonstring.Append(b, text)
		for _, k := range [...]string{"annotations", "logprobs"} {
			b = append(b, `,"`...)
			b = append(b, k...)
			b = append(b, `":`...)
			if v := p.Get(k); v.IsArray() {
				b = append(b, v.Raw...)
			} else {
				b = append(b, "[]"...)
			}
		}
		return append(b, '}')
	case typ == "", typ == "input_text", typ == "output_text", typ == "text":
		b = append(b, `{"type":"input_text","text":`...)
		b = jsonstring.Append(b, text)
		return append(b, '}')
	case typ == "input_image" && p.Get("detail").Type != gjson.String:
		b = append(b, `{"detail":"auto"`...)
		b = appendMembers(b, p, func(k string) bool { return k != "detail" })
		return append(b, '}')
	}
	return append(b, p.Raw...)
}

// appendMembers appends ',' and each member of obj whose key keep accepts,
// as it was written.
func appendMembers(b []byte, obj gjson.Result, keep func(key string) bool) []byte {
	obj.ForEach(func(k, v gjson.Result) bool {
		if keep(k.Str) {
			b = append(b, ',')
			b = append(b, k.Raw...)
			b = append(b, ':')
			b = append(b, v.Raw...)
		}
		return true
	})
	return b
}
