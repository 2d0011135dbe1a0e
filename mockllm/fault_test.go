package mockllm

import (
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"
)

func TestStatusFault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                  string
		fault                 *Fault
		stream                bool
		status                int
		typ, code, message    string
		retryAfter, retryMs   string
		extraHeader, extraVal string
	}{
		{
			name:   "429 defaults with retry headers",
			fault:  &Fault{Status: 429, RetryAfter: "2", RetryAfterMs: "1500", Headers: map[string]string{"X-Should-Retry": "true"}},
			status: 429, typ: "requests", code: "rate_limit_exceeded", message: "mock fault: Too Many Requests",
			retryAfter: "2", retryMs: "1500", extraHeader: "x-should-retry", extraVal: "true",
		},
		{
			name:  "503 on a stream",
			fault: StatusFault(503, "", "overloaded"), stream: true,
			status: 503, typ: "server_error", code: "", message: "overloaded",
		},
		{
			name:   "custom type and code",
			fault:  &Fault{Status: 400, Type: "invalid_request_error", Code: "bad", Message: "nope"},
			status: 400, typ: "invalid_request_error", code: "bad", message: "nope",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, addr := start(t, Options{Respond: func(*Call) Turn { return Turn{Text: "x", Fault: tc.fault} }})
			r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", tc.stream, false, userHi))
			if r.status != tc.status || r.header["content-type"] != "application/json" {
				t.Fatalf("status %d, content-type %q", r.status, r.header["content-type"])
			}
			e := gjson.GetBytes(r.body, "error")
			for _, k := range []string{"message", "type", "param", "code"} {
				if !e.Get(k).Exists() {
					t.Fatalf("envelope lacks %q: %s", k, r.body)
				}
			}
			if e.Get("type").Str != tc.typ || e.Get("code").Str != tc.code || e.Get("message").Str != tc.message {
				t.Fatalf("envelope %s", r.body)
			}
			if tc.code == "" && e.Get("code").Type != gjson.Null {
				t.Fatalf("empty code must be null: %s", r.body)
			}
			if r.header["retry-after"] != tc.retryAfter || r.header["retry-after-ms"] != tc.retryMs {
				t.Fatalf("retry headers %v", r.header)
			}
			if tc.extraHeader != "" && r.header[tc.extraHeader] != tc.extraVal {
				t.Fatalf("extra header missing: %v", r.header)
			}
		})
	}
}

func TestResetFault(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		_, addr := start(t, Options{Respond: func(*Call) Turn { return Turn{Text: "x", Fault: ResetFault()} }})
		r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", stream, false, userHi))
		if len(r.raw) != 0 || !isReset(r.readErr) {
			t.Fatalf("stream=%v: got %q, err %v; want no bytes and a closed connection", stream, r.raw, r.readErr)
		}
	}
}

func TestStreamFaults(t *testing.T) {
	t.Parallel()
	text := "one two three four five" // role + 6 deltas + finish = 8 events
	tests := []struct {
		name  string
		fault *Fault
		check func(t *testing.T, r *rawResp, data []string)
	}{
		{
			name:  "cut after 3 events",
			fault: CutFault(3),
			check: func(t *testing.T, r *rawResp, data []string) {
				if r.status != 200 || r.ended || len(data) != 3 {
					t.Fatalf("status %d ended %v events %d: want 200, no terminating chunk, 3 events", r.status, r.ended, len(data))
				}
				for _, d := range data {
					if !gjson.Valid(d) {
						t.Fatalf("cut inside an event: %q", d)
					}
				}
			},
		},
		{
			name:  "cut before done",
			fault: CutFault(100),
			check: func(t *testing.T, r *rawResp, data []string) {
				if r.ended || len(data) != 8 || data[len(data)-1] == "[DONE]" {
					t.Fatalf("ended %v, %d events, last %q", r.ended, len(data), data[len(data)-1])
				}
			},
		},
		{
			name:  "malformed after 2 events",
			fault: MalformedFault(2),
			check: func(t *testing.T, r *rawResp, data []string) {
				if !r.ended || len(data) != 3 || gjson.Valid(data[2]) || !gjson.Valid(data[1]) {
					t.Fatalf("ended %v data %q", r.ended, data)
				}
			},
		},
		{
			name:  "error event after 1 event",
			fault: ErrorEventFault(1, "upstream_timeout", "timed out"),
			check: func(t *testing.T, r *rawResp, data []string) {
				events := sse(r.body)
				if len(events) != 2 || !strings.HasPrefix(events[1], "event: error\ndata: ") {
					t.Fatalf("events %q", events)
				}
				e := gjson.Get(strings.TrimPrefix(events[1], "event: error\ndata: "), "error")
				if e.Get("code").Str != "upstream_timeout" || e.Get("message").Str != "timed out" ||
					e.Get("type").Str != "server_error" || !e.Get("param").Exists() {
					t.Fatalf("error event %s", events[1])
				}
				if strings.Contains(string(r.body), "[DONE]") {
					t.Fatal("[DONE] after an error event")
				}
			},
		},
		{
			name:  "error answer is an error event first",
			fault: ErrorAnswerFault("server_error", "overloaded"),
			check: func(t *testing.T, r *rawResp, data []string) {
				events := sse(r.body)
				if r.status != 200 || len(events) != 1 || events[0] != "event: error\ndata: "+
					`{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}` {
					t.Fatalf("status %d events %q", r.status, events)
				}
			},
		},
		{
			name:  "empty",
			fault: EmptyFault(),
			check: func(t *testing.T, r *rawResp, data []string) {
				if len(data) != 2 || gjson.Get(data[0], "choices.0.delta.role").Str != "assistant" ||
					gjson.Get(data[0], "choices.0.delta.content").Str != "" || data[1] != "[DONE]" {
					t.Fatalf("data %q: want the role chunk and [DONE]", data)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, addr := start(t, Options{Respond: func(*Call) Turn { return Turn{Text: text, Fault: tc.fault} }})
			r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", true, false, userHi))
			tc.check(t, r, dataOf(sse(r.body)))
		})
	}
}

func TestStallFault(t *testing.T) {
	t.Parallel()
	const stall = 300 * time.Millisecond
	tests := []struct {
		name   string
		stream bool
	}{
		{name: "stream", stream: true},
		{name: "non-stream", stream: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, addr := start(t, Options{Respond: func(*Call) Turn { return Turn{Text: "abcdefgh", Fault: StallFault(2, stall)} }})
			t0 := time.Now()
			r := do(t, addr, "POST", "/v1/chat/completions", chatBody("m", tc.stream, false, userHi))
			if el := time.Since(t0); el < stall {
				t.Fatalf("answered in %v, want a stall of %v", el, stall)
			}
			if tc.stream {
				checkStream(t, r.body, "m", false) // carries on normally after the stall
			} else if r.status != 200 || !gjson.ValidBytes(r.body) {
				t.Fatalf("status %d body %s", r.status, r.body)
			}
		})
	}
}

func TestStallTiming(t *testing.T) {
	t.Parallel()
	// The stall happens after StallAfter events: the first two events arrive early.
	_, addr := start(t, Options{Respond: func(*Call) Turn { return Turn{Text: "abcdefgh", Fault: StallFault(2, 400*time.Millisecond)} }})
	t0 := time.Now()
	c := dialStream(t, addr, chatBody("m", true, false, userHi))
	readEvents(t, c, 2)
	if el := time.Since(t0); el > 300*time.Millisecond {
		t.Fatalf("first events took %v", el)
	}
	readEvents(t, c, 1)
	if el := time.Since(t0); el < 400*time.Millisecond {
		t.Fatalf("third event after %v, want after the stall", el)
	}
}

func TestNonStreamFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault *Fault
		check func(t *testing.T, r *rawResp)
	}{
		{
			name:  "cut",
			fault: CutFault(0),
			check: func(t *testing.T, r *rawResp) {
				if r.status != 200 || r.ended || len(r.body) == 0 || gjson.ValidBytes(r.body) {
					t.Fatalf("status %d ended %v body %q", r.status, r.ended, r.body)
				}
			},
		},
		{
			name:  "malformed",
			fault: MalformedFault(0),
			check: func(t *testing.T, r *rawResp) {
				if r.status != 200 || !r.ended || gjson.ValidBytes(r.body) {
					t.Fatalf("status %d ended %v body %q", r.status, r.ended, r.body)
				}
			},
		},
		{
			name:  "error event becomes a 500",
			fault: ErrorEventFault(0, "boom", "broken"),
			check: func(t *testing.T, r *rawResp) {
				if r.status != 500 || gjson.GetBytes(r.body, "error.code").Str != "boom" {
					t.Fatalf("status %d body %s", r.status, r.body)
				}
			},
		},
		{
			name:  "error answer is a 200 with the envelope",
			fault: ErrorAnswerFault("server_error", "overloaded"),
			check: func(t *testing.T, r *rawResp) {
				if r.status != 200 || string(r.body) != `{"error":{"message":"overloaded","type":"server_error","param":null,"code":null}}` {
					t.Fatalf("status %d body %s", r.status, r.body)
				}
			},
		},
		{
			name:  "empty",
			fault: EmptyFault(),
			check: func(t *testing.T, r *rawResp) {
				c := gjson.GetManyBytes(r.body, "object", "choices", "usage.total_tokens")
				if r.status != 200 || c[0].Str != "chat.completion" || c[1].Raw != "[]" || c[2].Int() == 0 {
					t.Fatalf("status %d body %s", r.status, r.body)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, addr := start(t, Options{Respond: func(*Call) Turn { return Turn{Text: "hello world", Fault: tc.fault} }})
			tc.check(t, do(t, addr, "POST", "/v1/chat/completions", chatBody("m", false, false, userHi)))
		})
	}
}
