package mockllm

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestValidation(t *testing.T) {
	t.Parallel()
	const (
		asst2  = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"g","arguments":"{}"}}]}`
		tool1  = `{"role":"tool","tool_call_id":"c1","content":"r1"}`
		tool2  = `{"role":"tool","tool_call_id":"c2","content":"r2"}`
		user   = `{"role":"user","content":"hi"}`
		toolX  = `{"role":"tool","tool_call_id":"cX","content":"r"}`
		noIDTo = `{"role":"tool","content":"r"}`
	)
	msgs := func(m ...string) string { return "[" + strings.Join(m, ",") + "]" }
	tests := []struct {
		name       string
		body       string
		status     int
		param      string
		code       string
		msgContain string
	}{
		{name: "valid round trip", body: chatBody("m", false, false, msgs(user, asst2, tool1, tool2)), status: 200},
		{name: "results in any order", body: chatBody("m", false, false, msgs(user, asst2, tool2, tool1, user)), status: 200},
		{name: "malformed JSON", body: `{"model":"m","messages":[`, status: 400, msgContain: "could not parse the JSON body"},
		{name: "not an object", body: `[1,2]`, status: 400},
		{name: "missing model", body: `{"messages":` + msgs(user) + `}`, status: 400, param: "model"},
		{name: "empty model", body: `{"model":"","messages":` + msgs(user) + `}`, status: 400, param: "model"},
		{name: "missing messages", body: `{"model":"m"}`, status: 400, param: "messages", code: "missing_required_parameter"},
		// One choice is all the mock answers: more is refused, never answered with fewer.
		{name: "n 2", body: `{"model":"m","n":2,"messages":` + msgs(user) + `}`, status: 400, param: "n", code: "unsupported_parameter"},
		{name: "n 1", body: `{"model":"m","n":1,"messages":` + msgs(user) + `}`, status: 200},
		{name: "empty messages", body: `{"model":"m","messages":[]}`, status: 400, param: "messages", code: "empty_array"},
		{name: "messages not array", body: `{"model":"m","messages":"hi"}`, status: 400, param: "messages"},
		{name: "unknown role", body: chatBody("m", false, false, `[{"role":"robot","content":"x"}]`), status: 400, param: "messages.[0].role", code: "invalid_value"},
		{name: "missing tool result", body: chatBody("m", false, false, msgs(user, asst2, tool1)), status: 400, param: "messages.[1].role", msgContain: "did not have response messages: c2"},
		{name: "missing results then user", body: chatBody("m", false, false, msgs(user, asst2, user)), status: 400, msgContain: "c1, c2"},
		{name: "orphan tool message", body: chatBody("m", false, false, msgs(user, toolX)), status: 400, param: "messages.[1].role", msgContain: "must be a response to a preceeding message"},
		{name: "tool answers unknown id", body: chatBody("m", false, false, msgs(user, asst2, tool1, toolX)), status: 400, param: "messages.[3].tool_call_id"},
		{name: "duplicate tool result", body: chatBody("m", false, false, msgs(user, asst2, tool1, tool1, tool2)), status: 400, param: "messages.[3].tool_call_id"},
		{name: "tool without id", body: chatBody("m", false, false, msgs(user, asst2, noIDTo)), status: 400, param: "messages.[2].tool_call_id"},
		{name: "stream_options without stream", body: `{"model":"m","messages":` + msgs(user) + `,"stream_options":{"include_usage":true}}`, status: 400, param: "stream_options"},
	}
	_, addr := start(t, Options{Respond: func(*Call) Turn { return Turn{Text: "ok"} }})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := do(t, addr, "POST", "/v1/chat/completions", tc.body)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if tc.status == 200 {
				return
			}
			e := gjson.GetBytes(r.body, "error")
			if e.Get("type").Str != "invalid_request_error" || !e.Get("param").Exists() || !e.Get("code").Exists() {
				t.Fatalf("envelope %s", r.body)
			}
			if tc.param != "" && e.Get("param").Str != tc.param {
				t.Fatalf("param %q, want %q", e.Get("param").Str, tc.param)
			}
			if tc.code != "" && e.Get("code").Str != tc.code {
				t.Fatalf("code %q, want %q", e.Get("code").Str, tc.code)
			}
			if !strings.Contains(e.Get("message").Str, tc.msgContain) {
				t.Fatalf("message %q lacks %q", e.Get("message").Str, tc.msgContain)
			}
		})
	}
}

func TestContextWindow(t *testing.T) {
	t.Parallel()
	s, addr := start(t, Options{ContextWindow: map[string]int{"small": 50, "big": 100000}})
	long := `[{"role":"user","content":"` + strings.Repeat("word ", 100) + `"}]`
	tests := []struct {
		name, model string
		status      int
	}{
		{name: "over the window", model: "small", status: 400},
		{name: "within the window", model: "big", status: 200},
		{name: "no window", model: "other", status: 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := do(t, addr, "POST", "/v1/chat/completions", chatBody(tc.model, false, false, long))
			if r.status != tc.status {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if tc.status == 400 {
				e := gjson.GetBytes(r.body, "error")
				msg := e.Get("message").Str
				if e.Get("code").Str != "context_length_exceeded" || e.Get("type").Str != "invalid_request_error" ||
					!strings.HasPrefix(msg, "This model's maximum context length is 50 tokens. However, your messages resulted in ") {
					t.Fatalf("envelope %s", r.body)
				}
			}
		})
	}
	t.Cleanup(func() {
		if s.Calls("small") != 1 {
			t.Errorf("refused call not counted: %d", s.Calls("small"))
		}
	})
}

func TestCallFields(t *testing.T) {
	t.Parallel()
	got := make(chan Call, 1)
	_, addr := start(t, Options{Respond: func(c *Call) Turn {
		cp := *c
		cp.Body = append([]byte(nil), c.Body...)
		cp.Header = nil
		if c.Header("X-Test") != "yes" {
			cp.Model = "header missing"
		}
		got <- cp
		return Turn{Text: "ok"}
	}})
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"q"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"a","content":"RA"},{"role":"tool","tool_call_id":"b","content":[{"type":"text","text":"R"},{"type":"text","text":"B"}]}],` +
		`"tools":[{"type":"function","function":{"name":"f"}},{"type":"custom","custom":{"name":"g"}}]}`
	r := do(t, addr, "POST", "/v1/chat/completions", body, "X-Test", "yes")
	if r.status != 200 {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	c := <-got
	if c.Model != "m" || c.N != 1 || !c.Stream || c.LastRole != "tool" || c.LastText != "RB" ||
		strings.Join(c.Tools, ",") != "f,g" || strings.Join(c.ToolResults, "|") != "RA|RB" || string(c.Body) != body {
		t.Fatalf("call %+v", c)
	}
}

func FuzzParseChat(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a"}]},{"role":"tool","tool_call_id":"a","content":[{"text":"x"}]}],"tools":[{"function":{"name":"f"}}]}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"tool","tool_call_id":"a"}],"stream":true,"stream_options":{"include_usage":true}}`))
	f.Add([]byte(`{"model":1,"messages":{}}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := parseChat(body)
		if (p == nil) == (err == nil) {
			t.Fatalf("exactly one of result and error expected: %v %v", p, err)
		}
		if err != nil {
			if err.status != 400 || err.typ != "invalid_request_error" || !gjson.ValidBytes(appendErrorObject(nil, err)) {
				t.Fatalf("bad refusal %+v", err)
			}
			return
		}
		if p.call.Model == "" || p.promptTokens < 1 {
			t.Fatalf("accepted without model or tokens: %+v", p)
		}
	})
}
