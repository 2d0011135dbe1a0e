package responses

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wiretest"
)

// A record is read back only by its tenant, a record over MaxBytes is not
// kept, Delete removes it, and the resolver finds an output item by the id
// the encoder gave it.
func TestStore(t *testing.T) {
	ctx := context.Background()
	s := &Store{KV: caching.NewMemoryStore(1 << 20), MaxBytes: 600}
	obj := []byte(`{"id":"resp_x1","output":[{"id":"msg_x1_0","type":"message","role":"assistant","content":[]},{"id":"fc_x1_1","type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}`)
	ok, err := s.Save(ctx, "a", "resp_x1", obj, []byte(`[]`), []byte(`[{"role":"user","content":"q"}]`), []byte(`{"role":"assistant","content":"hi"}`))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	rec, found, err := s.Load(ctx, "a", "resp_x1")
	if err != nil || !found || rec.History.Get("#").Int() != 2 || rec.History.Get("1.content").Str != "hi" {
		t.Fatalf("load: %v %v %s", found, err, rec.History.Raw)
	}
	if _, found, _ := s.Load(ctx, "b", "resp_x1"); found {
		t.Fatal("tenant b read tenant a's response")
	}
	if it := resolved(t, s.Resolver(ctx, "a"), "fc_x1_1"); it.Get("call_id").Str != "c" {
		t.Fatalf("resolver: %s", it.Raw)
	}
	if it := resolved(t, s.Resolver(ctx, "b"), "fc_x1_1"); it.Exists() {
		t.Fatal("tenant b resolved tenant a's item")
	}
	big := make([]byte, 700)
	for i := range big {
		big[i] = 'x'
	}
	if ok, _ := s.Save(ctx, "a", "resp_big", obj, []byte(`["`+string(big)+`"]`), []byte(`[]`), nil); ok {
		t.Fatal("a record over MaxBytes was kept")
	}
	if ok, err := s.Delete(ctx, "b", "resp_x1"); ok || err != nil {
		t.Fatal("tenant b deleted tenant a's response")
	}
	if ok, err := s.Delete(ctx, "a", "resp_x1"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, found, _ := s.Load(ctx, "a", "resp_x1"); found {
		t.Fatal("deleted response still there")
	}
}

// A request's references read each stored response once, and no more than
// maxReferenced distinct ones.
func TestResolverBoundsLoads(t *testing.T) {
	ctx := context.Background()
	kv := &countingKV{KV: caching.NewMemoryStore(1 << 20)}
	s := &Store{KV: kv}
	obj := []byte(`{"id":"resp_a","output":[{"id":"msg_a_0","type":"message"},{"id":"fc_a_1","type":"function_call"}]}`)
	if _, err := s.Save(ctx, "t", "resp_a", obj, []byte(`[]`), []byte(`[]`), nil); err != nil {
		t.Fatal(err)
	}
	resolve := s.Resolver(ctx, "t")
	for range 10 {
		if !resolved(t, resolve, "msg_a_0").Exists() || !resolved(t, resolve, "fc_a_1").Exists() {
			t.Fatal("a stored item did not resolve")
		}
	}
	if kv.gets != 1 {
		t.Fatalf("%d store reads for one referenced response", kv.gets)
	}
	for i := range 100 {
		// Past the bound a reference is refused as such, not taken for
		// a missing item (whose 404 tells a client to drop it).
		if _, err := resolve("msg_x" + strconv.Itoa(i) + "_0"); (i >= maxReferenced-1) != errors.Is(err, ErrTooManyReferenced) {
			t.Fatalf("reference %d: %v", i, err)
		}
	}
	if kv.gets != maxReferenced {
		t.Fatalf("%d store reads, want at most %d", kv.gets, maxReferenced)
	}
}

// An input item is named by the one id input_items gives it: "in_x_0",
// never an alias of its number ("in_x_00", "in_x_+0"), which a request's
// each-item-once check would count as another item (150 aliases of one
// 1 MB item made a 150 MB upstream body).
func TestInputItemIDHasNoAlias(t *testing.T) {
	ctx := context.Background()
	s := &Store{KV: caching.NewMemoryStore(1 << 20)}
	obj := []byte(`{"id":"resp_x","output":[]}`)
	if _, err := s.Save(ctx, "t", "resp_x", obj, []byte(`[{"type":"message","role":"user","content":"big"}]`), []byte(`[]`), nil); err != nil {
		t.Fatal(err)
	}
	resolve := s.Resolver(ctx, "t")
	if !resolved(t, resolve, "in_x_0").Exists() {
		t.Fatal("the input item did not resolve")
	}
	for _, alias := range []string{"in_x_00", "in_x_+0", "in_x_-0", "in_x_0 ", "in_x_000"} {
		if resolved(t, resolve, alias).Exists() {
			t.Errorf("%q resolved", alias)
		}
	}
}

// An mcp_approval_request's id is its call's approval id, which names no
// response: an item_reference to it (the AI SDK sends one, with store on,
// before the mcp_approval_response) resolves through an index entry the
// save writes, for the tenant that stored it only.
func TestApprovalRequestReferenceResolves(t *testing.T) {
	ctx := context.Background()
	s := &Store{KV: caching.NewMemoryStore(1 << 20)}
	obj := []byte(`{"id":"resp_r1","output":[{"id":"call_gwa_abc","type":"mcp_approval_request","server_label":"gateway","name":"calculator","arguments":"{}"}]}`)
	if _, err := s.Save(ctx, "t", "resp_r1", obj, []byte(`[]`), []byte(`[]`), nil); err != nil {
		t.Fatal(err)
	}
	if it := resolved(t, s.Resolver(ctx, "t"), "call_gwa_abc"); it.Get("type").Str != "mcp_approval_request" || it.Get("name").Str != "calculator" {
		t.Fatalf("the approval request did not resolve: %s", it.Raw)
	}
	if it := resolved(t, s.Resolver(ctx, "u"), "call_gwa_abc"); it.Exists() {
		t.Fatal("another tenant resolved it")
	}
	// Deleting the response deletes its index entry.
	if ok, err := s.Delete(ctx, "t", "resp_r1"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, ok, _ := s.KV.Get(ctx, heldByKey("t", "call_gwa_abc")); ok {
		t.Fatal("the index entry outlived its response")
	}
}

type countingKV struct {
	KV
	gets int
}

func (c *countingKV) Get(ctx context.Context, key string) ([]byte, bool, error) {
	c.gets++
	return c.KV.Get(ctx, key)
}

// input_items lists every kind of input item as the item resource the
// schema describes: ids and statuses filled in, a message's parts in its
// role's form, and a referenced item as the stored item itself.
func TestInputListItems(t *testing.T) {
	t.Parallel()
	schema := wiretest.LoadResponsesSchema(t)
	stored := gjson.Parse(`{"id":"msg_p_0","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"before","annotations":[],"logprobs":[]}]}`)
	resolve := func(id string) (gjson.Result, error) {
		if id == "msg_p_0" {
			return stored, nil
		}
		return gjson.Result{}, nil
	}
	for _, tc := range []struct{ name, item, want string }{
		{"user string", `{"role":"user","content":"hi"}`, `content.0.type=input_text`},
		{"user parts", `{"type":"message","role":"user","content":[{"type":"input_text","text":"look"},{"type":"input_image","image_url":"https://x/y.png"}]}`, `content.1.detail=auto`},
		{"assistant string", `{"role":"assistant","content":"earlier"}`, `content.0.type=output_text`},
		{"assistant parts", `{"role":"assistant","content":[{"type":"output_text","text":"earlier"}]}`, `content.0.text=earlier`},
		{"function call without id", `{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}`, `status=completed`},
		{"function call output", `{"type":"function_call_output","call_id":"c1","output":"sunny"}`, `call_id=c1`},
		{"reference", `{"type":"item_reference","id":"msg_p_0"}`, `id=msg_p_0`},
		{"reference without type", `{"id":"msg_p_0"}`, `content.0.text=before`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			body := `{"model":"m","input":[{"role":"user","content":"w"},` + tc.item + `]}`
			if strings.Contains(tc.item, "function_call_output") {
				body = `{"model":"m","input":[{"role":"user","content":"w"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},` + tc.item + `]}`
			}
			r, err := Translate([]byte(body), nil, resolve)
			if err != nil {
				t.Fatal(err)
			}
			list := InputList("resp_x", gjson.ParseBytes(r.Input), InputPage{Asc: true})
			if err := schema.Validate("ResponseItemList", list); err != nil {
				t.Fatalf("%v\n%s", err, list)
			}
			k, v, _ := strings.Cut(tc.want, "=")
			last := strconv.Itoa(int(gjson.GetBytes(list, "data.#").Int()) - 1)
			if got := gjson.GetBytes(list, "data."+last+"."+k).String(); got != v {
				t.Fatalf("%s = %q, want %q: %s", k, got, v, list)
			}
		})
	}
}

// InputList pages newest first by default, oldest first when asked, limit
// items at a time from after the item named.
func TestInputListPages(t *testing.T) {
	t.Parallel()
	input := gjson.Parse(`[{"role":"user","content":"a"},{"role":"user","content":"b"},{"role":"user","content":"c"}]`)
	for _, tc := range []struct {
		name string
		page InputPage
		want string // texts, then has_more
	}{
		{"default", InputPage{}, "c,b,a false"},
		{"asc", InputPage{Asc: true}, "a,b,c false"},
		{"limit", InputPage{Limit: 2}, "c,b true"},
		{"after", InputPage{Limit: 2, After: "in_x_1"}, "a false"},
		{"asc after", InputPage{Asc: true, After: "in_x_0"}, "b,c false"},
		{"after unknown", InputPage{After: "in_y_0"}, " false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			list := gjson.ParseBytes(InputList("resp_x", input, tc.page))
			var texts []string
			list.Get("data.#.content.0.text").ForEach(func(_, v gjson.Result) bool {
				texts = append(texts, v.Str)
				return true
			})
			if got := strings.Join(texts, ",") + " " + list.Get("has_more").Raw; got != tc.want {
				t.Fatalf("got %q, want %q: %s", got, tc.want, list.Raw)
			}
		})
	}
}

// A response's output continues the conversation as the chat messages its
// model produced and saw: the text and the calls of one turn in one
// assistant message, the results of the calls the gateway ran after it;
// reasoning left out.
func TestAnswerMessages(t *testing.T) {
	t.Parallel()
	obj := `{"output":[{"type":"reasoning","id":"rs_x_0","summary":[]},` +
		`{"type":"message","id":"msg_x_1","role":"assistant","content":[{"type":"output_text","text":"Checking.","annotations":[],"logprobs":[]}]},` +
		`{"type":"function_call","id":"fc_x_2","call_id":"call_c","name":"weather","arguments":"{}","status":"completed"},` +
		`{"type":"mcp_call","id":"mcp_x_3","server_label":"builtin","name":"calc","arguments":"{\"e\":\"1+1\"}","output":"2","error":null,"status":"completed"},` +
		`{"type":"message","id":"msg_x_4","role":"assistant","content":[{"type":"output_text","text":"Done.","annotations":[],"logprobs":[]}]}]}`
	got := "[" + string(AnswerMessages([]byte(obj))) + "]"
	want := `[{"role":"assistant","content":"Checking.","tool_calls":[` +
		`{"id":"call_c","type":"function","function":{"name":"weather","arguments":"{}"}},` +
		`{"id":"mcp_x_3","type":"function","function":{"name":"calc","arguments":"{\"e\":\"1+1\"}"}}]},` +
		`{"role":"tool","tool_call_id":"mcp_x_3","content":"2"},{"role":"assistant","content":"Done."}]`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if got := AnswerMessages([]byte(`{"output":[]}`)); len(got) != 0 {
		t.Fatalf("no output: %s", got)
	}
}

// @openai/agents replays the mcp_call items of an earlier response without
// their output, which it expects the server to have kept: the model of the
// next turn still sees each result (or error), taken from the stored item
// of the same tenant. An item the store does not hold is left out, call
// and result (a probe saw the model told the tool returned ""): as a
// client that keeps no server calls sends its history.
func TestTranslateMcpCallOutputFromStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := &Store{KV: caching.NewMemoryStore(1 << 20)}
	obj := []byte(`{"id":"resp_a","output":[
		{"id":"mcp_a_0","type":"mcp_call","server_label":"builtin","name":"calc","arguments":"{}","status":"completed","error":null,"output":"42"},
		{"id":"mcp_a_1","type":"mcp_call","server_label":"builtin","name":"calc","arguments":"{}","status":"failed","output":null,"error":{"type":"mcp_tool_execution_error","content":"boom"}}]}`)
	if _, err := s.Save(ctx, "t", "resp_a", obj, []byte(`[]`), []byte(`[]`), nil); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","input":[{"role":"user","content":"q"},
		{"id":"mcp_a_0","type":"mcp_call","server_label":"builtin","name":"calc","arguments":"{}","status":"completed","error":null},
		{"id":"mcp_a_1","type":"mcp_call","server_label":"builtin","name":"calc","arguments":"{}","status":"failed","error":null},
		{"id":"mcp_b_0","type":"mcp_call","server_label":"builtin","name":"calc","arguments":"{}","status":"completed","error":null}]}`)
	for _, tc := range []struct{ name, tenant, want string }{
		{"same tenant", "t", `["42","error: boom"]`},
		{"other tenant", "u", `[]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Translate(body, nil, s.Resolver(ctx, tc.tenant))
			if err != nil {
				t.Fatal(err)
			}
			if got := gjson.GetBytes(r.Chat, `messages.#(role=="tool")#.content`).Raw; got != tc.want {
				t.Fatalf("tool results %s, want %s\n%s", got, tc.want, r.Chat)
			}
			if bytes.Contains(r.Chat, []byte("mcp_b_0")) {
				t.Fatalf("the call without a known result is in the history: %s", r.Chat)
			}
		})
	}
	// An SDK that writes unset fields as null: the stored output is still
	// taken; an error in OpenAI's form (a string) is shown as its text.
	nulls := []byte(`{"model":"m","input":[{"role":"user","content":"q"},
		{"id":"mcp_a_0","type":"mcp_call","server_label":"builtin","name":"calc","arguments":"{}","output":null,"error":null},
		{"id":"mcp_c_0","type":"mcp_call","server_label":"builtin","name":"calc","arguments":"{}","output":null,"error":"bad input"}]}`)
	r, err := Translate(nulls, nil, s.Resolver(ctx, "t"))
	if err != nil {
		t.Fatal(err)
	}
	if got := gjson.GetBytes(r.Chat, `messages.#(role=="tool")#.content`).Raw; got != `["42","error: bad input"]` {
		t.Fatalf("tool results %s\n%s", got, r.Chat)
	}
	// Each stored output is given once, as a referenced item is: many
	// small items naming one output must not expand without bound.
	item := `{"id":"mcp_a_0","type":"mcp_call","server_label":"builtin","name":"calc","arguments":"{}","error":null}`
	_, err = Translate([]byte(`{"model":"m","input":[`+item+`,`+item+`]}`), nil, s.Resolver(ctx, "t"))
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != "input[1].id" {
		t.Fatalf("one stored output named twice: %v, want a 400 naming input[1].id", err)
	}
}

// An approved call replayed without its output, and not stored: the
// decision's place holds a result saying so, not "" (the tool returned
// nothing) and not the decision (which the loop would apply again).
func TestApprovedCallWithoutKeptOutput(t *testing.T) {
	t.Parallel()
	body := []byte(`{"model":"m","input":[{"role":"user","content":"q"},
		{"id":"mcpr_1","type":"mcp_approval_request","server_label":"builtin","name":"calc","arguments":"{}"},
		{"type":"mcp_approval_response","approval_request_id":"mcpr_1","approve":true},
		{"id":"mcp_1","type":"mcp_call","server_label":"builtin","name":"calc","arguments":"{}","approval_request_id":"mcpr_1"}]}`)
	r, err := Translate(body, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := gjson.GetBytes(r.Chat, `messages.#(role=="tool")#`).Array()
	if len(tools) != 1 || tools[0].Get("tool_call_id").Str != "mcpr_1" || tools[0].Get("content").Str != unkeptResult {
		t.Fatalf("tool messages %v\n%s", tools, r.Chat)
	}
}

// max_tool_calls is an integer by its literal: one that only rounds to an
// integer in a float64 is refused, as every integer setting is.
func TestMaxToolCallsIsAnInteger(t *testing.T) {
	t.Parallel()
	for raw, ok := range map[string]bool{"2": true, "2.0": true, "0": true, "2.0000000000000000001": false, "-1": false, `"2"`: false} {
		_, err := Translate([]byte(`{"model":"m","input":"q","max_tool_calls":`+raw+`}`), nil, nil)
		if (err == nil) != ok {
			t.Errorf("max_tool_calls %s: err %v", raw, err)
		}
	}
}

// The ids input_items lists for input items that had none resolve to those
// items, for their tenant only; an item with an id of its own keeps it.
func TestResolverFindsListedInputItems(t *testing.T) {
	ctx := context.Background()
	s := &Store{KV: caching.NewMemoryStore(1 << 20)}
	input := `[{"role":"user","content":"q"},{"id":"own_1","type":"message","role":"user","content":"r"},{"role":"user","content":"s"}]`
	if ok, err := s.Save(ctx, "a", "resp_x2", []byte(`{"id":"resp_x2","output":[]}`), []byte(input), []byte(`[]`), nil); err != nil || !ok {
		t.Fatal(ok, err)
	}
	list := gjson.GetBytes(InputList("resp_x2", gjson.Parse(input), InputPage{Asc: true}), "data.#.id").Array()
	if len(list) != 3 || list[0].Str != "in_x2_0" || list[1].Str != "own_1" || list[2].Str != "in_x2_2" {
		t.Fatalf("listed ids %v", list)
	}
	resolve := s.Resolver(ctx, "a")
	for id, want := range map[string]string{"in_x2_0": "q", "in_x2_2": "s"} {
		if it := resolved(t, resolve, id); it.Get("content").Str != want {
			t.Errorf("%s resolved to %s, want the item with content %q", id, it.Raw, want)
		}
	}
	for _, id := range []string{"in_x2_1", "in_x2_3", "in_x2_-1", "in_x2_x"} {
		if it := resolved(t, resolve, id); it.Exists() {
			t.Errorf("%s resolved to %s", id, it.Raw)
		}
	}
	if it := resolved(t, s.Resolver(ctx, "b"), "in_x2_0"); it.Exists() {
		t.Error("tenant b resolved tenant a's input item")
	}
}

// resolved is what r finds of id, failing t when r could not look.
func resolved(t *testing.T, r Resolver, id string) gjson.Result {
	t.Helper()
	v, err := r(id)
	if err != nil {
		t.Fatalf("resolving %s: %v", id, err)
	}
	return v
}

// failingKV is a store that cannot be read (Redis down).
type failingKV struct{ KV }

func (failingKV) Get(context.Context, string) ([]byte, bool, error) {
	return nil, false, errors.New("redis: connection refused")
}

// A reference the store could not look up is a 503 to retry, and one past
// the bound on stored responses a request reads is a 400: neither is a
// missing item, whose 404 tells an SDK to drop what it holds (a review:
// both were 404 item_not_found).
func TestReferenceLookupFailures(t *testing.T) {
	ctx := context.Background()
	down := &Store{KV: failingKV{caching.NewMemoryStore(1 << 10)}}
	_, err := Translate([]byte(`{"model":"m","input":[{"type":"item_reference","id":"msg_a_0"}]}`), nil, down.Resolver(ctx, "t"))
	var pe *pipeline.Error
	if !errors.As(err, &pe) || pe.Status != 503 || strings.Contains(pe.Message, "refused") {
		t.Fatalf("store down: %v", err)
	}
	up := &Store{KV: caching.NewMemoryStore(1 << 20)}
	var refs []string
	for i := range maxReferenced + 1 {
		refs = append(refs, `{"type":"item_reference","id":"msg_r`+strconv.Itoa(i)+`_0"}`)
	}
	_, err = Translate([]byte(`{"model":"m","input":[`+strings.Join(refs, ",")+`]}`), nil, up.Resolver(ctx, "t"))
	if !errors.As(err, &pe) || pe.Status != 404 {
		t.Fatalf("unknown items within the bound: %v, want the first one's 404", err)
	}
	for i := range maxReferenced {
		id := "resp_r" + strconv.Itoa(i)
		obj := []byte(`{"id":"` + id + `","output":[{"id":"msg_r` + strconv.Itoa(i) + `_0","type":"message","role":"assistant","content":[]}]}`)
		if _, err := up.Save(ctx, "t", id, obj, []byte(`[]`), []byte(`[]`), nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err = Translate([]byte(`{"model":"m","input":[`+strings.Join(refs, ",")+`]}`), nil, up.Resolver(ctx, "t"))
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != "input" {
		t.Fatalf("one response past the bound: %v, want a 400", err)
	}
}
