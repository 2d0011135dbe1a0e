package toolloop

import (
	"bytes"
	"context"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

// storedState is a StateStore whose every key holds the turn that raw (a
// value read back from Redis, untrusted) decodes to, or none.
type storedState struct{ raw []byte }

func (storedState) Save(context.Context, string, *HiddenTurn) error { return nil }

func (s storedState) Load(_ context.Context, keys []string) ([]*HiddenTurn, error) {
	out := make([]*HiddenTurn, len(keys))
	for i := range keys {
		out[i], _ = decodeTurn(s.raw)
	}
	return out, nil
}

// FuzzResume: any follow-up body, against any stored value, resumes without
// panicking and without modifying the caller's request. A valid body stays
// valid JSON with its messages an array no shorter than the client's (a
// spliced message becomes at least the turn's assistant message), and a
// body with nothing spliced is the caller's request itself.
func FuzzResume(f *testing.F) {
	const follow = `{"model":"m","messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"lookup","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"r1"},{"role":"tool","tool_call_id":"c2","content":"r2"}]}`
	turn := encodeTurn(testTurn("c1", "c2"))
	f.Add(follow, turn)
	f.Add(follow, encodeTurn(testTurn("c1")))
	f.Add(follow, []byte(`{"p":[ ],"a":{},"r":[],"c":["c1","c2"],"s":0}`))
	f.Add(follow, []byte(`{"p":[1,"x",null],"a":{"role":"assistant"},"r":[[],{}],"c":["c2","c1"],"s":-1}`))
	f.Add(follow, []byte(`{"a":{},"r":[],"c":["c1","c2"]}`))
	f.Add(`{"messages":[{"role":"assistant","tool_calls":[{"id":"c1"},{"id":"c2"}]},{"role":"assistant","tool_calls":[{"id":"c1"},{"id":"c2"}]}]}`, turn)
	f.Add(`{"messages":[{"role":"assistant","tool_calls":[{"id":""}]},1,"x",null]}`, turn)
	f.Add(`{"messages":{"role":"assistant","tool_calls":[{"id":"c1"}]}}`, turn)
	f.Add(`{"messages":[],"messages":[{"role":"assistant","tool_calls":[{"id":"c1"},{"id":"c2"}]}]}`, turn)
	f.Add(`{"me\u0073sages":[{"role":"assistant","tool_calls":[{"id":"c1"},{"id":"c2"}]}],"tool_calls":1}`, turn)
	f.Add(`[{"role":"assistant","tool_calls":[{"id":"c1"}]}]`, turn)
	f.Add(`not json "tool_calls"`, []byte(`{`))
	ctx := context.Background()
	tenant := &pipeline.Tenant{Name: "t"}
	f.Fuzz(func(t *testing.T, body string, stored []byte) {
		l, err := New(Options{State: storedState{raw: stored}})
		if err != nil {
			t.Fatal(err)
		}
		req := &pipeline.Request{ID: "r", Body: []byte(body), Tenant: tenant}
		out := l.resume(ctx, req)
		if string(req.Body) != body {
			t.Fatalf("resume modified the caller's request: %q", req.Body)
		}
		if out == nil {
			t.Fatal("nil request")
		}
		if out == req {
			return
		}
		if bytes.Equal(out.Body, req.Body) {
			t.Fatalf("a clone with an unchanged body %q", body)
		}
		if !gjson.Valid(body) {
			return
		}
		if !gjson.ValidBytes(out.Body) {
			t.Fatalf("valid body %q with stored %q resumed to invalid JSON %q", body, stored, out.Body)
		}
		in, got := gjson.Get(body, "messages"), gjson.GetBytes(out.Body, "messages")
		if !got.IsArray() || len(got.Array()) < len(in.Array()) {
			t.Fatalf("messages %s resumed to %s", in.Raw, got.Raw)
		}
	})
}
