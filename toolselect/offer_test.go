package toolselect

import (
	"bytes"
	"slices"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

const offerBody = `{"model":"m","tools":[` +
	`{"type":"function","function":{"name":"a","description":"A tool"}},` +
	`{"type":"custom","custom":{"name":"b","description":"B tool"}},` +
	`{"type":"function","function":{"name":"c"}},` +
	`{"type":"function"}],` +
	`"tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"x"}}]}},` +
	`"messages":[{"role":"user","content":"first"},` +
	`{"role":"assistant","tool_calls":[{"id":"1","type":"function","function":{"name":"h1","arguments":"{}"}},{"id":"2","type":"custom","custom":{"name":"h2","input":""}}]},` +
	`{"role":"tool","tool_call_id":"1","content":"r"},{"role":"tool","tool_call_id":"2","content":"r"},` +
	`{"role":"assistant","function_call":{"name":"h3","arguments":"{}"}},` +
	`{"role":"user","content":[{"type":"text","text":"latest"},{"type":"image_url","image_url":{"url":"u"}},{"type":"text","text":"turn"}]},` +
	`{"role":"assistant","content":"answer after it"}]}`

// parseOffer reads the client's tools, pins what the history calls and
// what tool_choice names, and takes the text of the last user message.
func TestParseOffer(t *testing.T) {
	t.Parallel()
	o := parseOffer([]byte(offerBody))
	var names []string
	for _, c := range o.client {
		names = append(names, c.name)
	}
	if !slices.Equal(names, []string{"a", "b", "c", ""}) || o.client[0].description != "A tool" || o.client[1].description != "B tool" {
		t.Fatalf("client tools %+v", o.client)
	}
	for _, n := range []string{"h1", "h2", "h3", "x"} {
		if !o.pinned[n] {
			t.Errorf("%s not pinned: %v", n, o.pinned)
		}
	}
	if len(o.pinned) != 4 || o.text != "latest\nturn" || o.none {
		t.Fatalf("pinned %v, text %q, none %v", o.pinned, o.text, o.none)
	}
	named := parseOffer([]byte(`{"tool_choice":{"type":"function","function":{"name":"n"}},"messages":[]}`))
	none := parseOffer([]byte(`{"tool_choice":"none","messages":[]}`))
	if !named.pinned["n"] || !none.none {
		t.Fatalf("tool_choice: named %v, none %v", named.pinned, none.none)
	}
	// "required" wants a call of the client's own tools: every one stays.
	required := parseOffer([]byte(`{"tool_choice":"required","tools":[{"type":"function","function":{"name":"mine"}},{"type":"function","function":{"name":"also"}}],"messages":[]}`))
	if !required.pinned["mine"] || !required.pinned["also"] || len(required.pinned) != 2 {
		t.Fatalf("tool_choice required: pinned %v", required.pinned)
	}
}

// withClientTools keeps the kept tools and the unnamed one, in order, and
// removes the key when none is left.
func TestWithClientTools(t *testing.T) {
	t.Parallel()
	body := []byte(offerBody)
	o := parseOffer(body)
	got, arr, err := withClientTools(body, o, map[string]bool{"c": true, "b": true})
	if err != nil || gjson.GetBytes(got, "tools").Raw != string(arr) {
		t.Fatalf("tools array %s in %s: %v", arr, got, err)
	}
	var names []string
	gjson.GetBytes(got, "tools").ForEach(func(_, v gjson.Result) bool { names = append(names, toolName(v)); return true })
	if !slices.Equal(names, []string{"b", "c", ""}) || gjson.GetBytes(got, "messages").Raw != gjson.GetBytes(body, "messages").Raw {
		t.Fatalf("tools %q in %s", names, got)
	}
	one := []byte(`{"tools":[{"type":"function","function":{"name":"a"}}],"messages":[]}`)
	got, arr, err = withClientTools(one, parseOffer(one), map[string]bool{})
	if err != nil || arr != nil || gjson.GetBytes(got, "tools").Exists() || !gjson.ValidBytes(got) {
		t.Fatalf("none kept: %s %v", got, err)
	}
}

// Needed is the cost of a configured selection that does not trigger: it
// counts the tools array's function and custom keys (not the history's nor
// tool_choice's), from the array ingress found when there is one, without
// allocating.
func TestNeededAllocatesNothing(t *testing.T) {
	s := &Selector{models: map[string]*settings{"m": {maxTools: 3}}}
	body := []byte(offerBody)
	req := &pipeline.Request{Model: "m", Body: body, Tools: []byte(gjson.GetBytes(body, "tools").Raw)}
	if s.Needed(req, 0) || !s.Needed(req, 1) {
		t.Fatal("3 counted client tools (the fourth has no function key): needed only with a server tool more")
	}
	if s.Needed(&pipeline.Request{Model: "m", Body: body}, 3) || !s.Needed(&pipeline.Request{Model: "m", Body: body}, 4) {
		t.Fatal("without ingress's array, only the server tools count")
	}
	other := &pipeline.Request{Model: "other", Body: []byte(offerBody)}
	if s.Needed(other, 100) {
		t.Fatal("needed for a model without selection")
	}
	if n := testing.AllocsPerRun(100, func() { s.Needed(req, 0) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

func FuzzParseOffer(f *testing.F) {
	f.Add([]byte(offerBody))
	f.Add([]byte(`{"tools":[{"function":{"name":"a"}}],"messages":[{"role":"user","content":7}]}`))
	f.Add([]byte(`{"tools":{},"messages":"x","tool_choice":[1]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !gjson.ValidBytes(body) || !gjson.ParseBytes(body).IsObject() {
			return // ingress refuses it
		}
		o := parseOffer(body)
		keep := map[string]bool{}
		for i, c := range o.client {
			if i%2 == 0 {
				keep[c.name] = true
			}
		}
		got, _, err := withClientTools(body, o, keep)
		if err == nil && !gjson.ValidBytes(got) {
			t.Fatalf("invalid body %q from %q", got, body)
		}
		var c counts
		_ = c.count(body)
	})
}

// counts counts an array once and answers a copy of it from memory without
// allocating; another array of the same slot is counted afresh.
func TestCountsRemembers(t *testing.T) { // not parallel: AllocsPerRun
	var c counts
	a := []byte(`[{"type":"function","function":{"name":"a"}},{"type":"custom","custom":{"name":"b"}}]`)
	if n := c.count(a); n != 2 {
		t.Fatalf("counted %d", n)
	}
	again := bytes.Clone(a)
	if n := testing.AllocsPerRun(100, func() { c.count(again) }); n != 0 || c.count(again) != 2 {
		t.Fatalf("%v allocations for a remembered array", n)
	}
	// The same length and sampled bytes, so the same slot: one tool fewer.
	b := bytes.Replace(bytes.Clone(a), []byte(`"custom":{`), []byte(`"cust0m":{`), 1)
	if slotOf(b) != slotOf(a) || c.count(b) != 1 || c.count(a) != 2 {
		t.Fatalf("slots %d %d, counts %d %d", slotOf(a), slotOf(b), c.count(b), c.count(a))
	}
	if c.count(nil) != 0 {
		t.Fatal("nil counted")
	}
}
