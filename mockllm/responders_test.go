package mockllm

import (
	"encoding/json"
	"github.com/llmgw/gateway/jsonstring"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

func TestSequence(t *testing.T) {
	t.Parallel()
	seq := Sequence(Turn{Text: "a"}, Turn{Text: "b"}, Turn{Text: "c"})
	var got []string
	for i := 0; i < 5; i++ {
		got = append(got, seq(&Call{}).Text)
	}
	if want := "a b c c c"; join(got) != want {
		t.Fatalf("got %q, want %q", join(got), want)
	}
	if Sequence()(&Call{}).Text != "" {
		t.Fatal("empty sequence must answer an empty turn")
	}
	// Concurrent callers each get a distinct early turn.
	par := Sequence(Turn{Text: "1"}, Turn{Text: "2"}, Turn{Text: "3"}, Turn{Text: "last"})
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			txt := par(&Call{}).Text
			mu.Lock()
			seen[txt]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if seen["1"] != 1 || seen["2"] != 1 || seen["3"] != 1 || seen["last"] != 7 {
		t.Fatalf("seen %v", seen)
	}
}

func join(s []string) string {
	out := ""
	for i, v := range s {
		if i > 0 {
			out += " "
		}
		out += v
	}
	return out
}

func TestToolThenAnswer(t *testing.T) {
	t.Parallel()
	r := ToolThenAnswer("weather", `{"city":"Oslo"}`, "The weather is")
	tests := []struct {
		name     string
		call     Call
		wantTool bool
		wantText string
	}{
		{name: "user with tool offered", call: Call{LastRole: "user", Tools: []string{"x", "weather"}}, wantTool: true},
		{name: "user without the tool", call: Call{LastRole: "user", Tools: []string{"x"}}, wantText: "The weather is"},
		{name: "after tool results", call: Call{LastRole: "tool", ToolResults: []string{"3C", "windy"}, Tools: []string{"weather"}}, wantText: "The weather is 3C windy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			turn := r(&tc.call)
			if tc.wantTool {
				if len(turn.ToolCalls) != 1 || turn.ToolCalls[0].Name != "weather" || turn.ToolCalls[0].Arguments != `{"city":"Oslo"}` || turn.Text != "" {
					t.Fatalf("turn %+v", turn)
				}
				return
			}
			if len(turn.ToolCalls) != 0 || turn.Text != tc.wantText {
				t.Fatalf("turn %+v", turn)
			}
		})
	}
}

func TestDemoResponder(t *testing.T) {
	t.Parallel()
	both := []string{"current_time", "calculator"}
	tests := []struct {
		name      string
		call      Call
		wantCalls []ToolCall
		wantText  string
	}{
		{name: "plain", call: Call{LastRole: "user", LastText: "hello"}, wantText: "Hello from the demo model. You said: hello"},
		{name: "time", call: Call{LastRole: "user", LastText: "What TIME is it?", Tools: both},
			wantCalls: []ToolCall{{Name: "current_time", Arguments: `{"timezone":"UTC"}`}}},
		{name: "time not offered", call: Call{LastRole: "user", LastText: "what time is it", Tools: []string{"calculator"}},
			wantText: "Hello from the demo model. You said: what time is it"},
		{name: "expression", call: Call{LastRole: "user", LastText: "What is 2 + 3*4?", Tools: both},
			wantCalls: []ToolCall{{Name: "calculator", Arguments: `{"expression":"2 + 3*4"}`}}},
		{name: "number without operator", call: Call{LastRole: "user", LastText: "I have 3 cats", Tools: both},
			wantText: "Hello from the demo model. You said: I have 3 cats"},
		{name: "both", call: Call{LastRole: "user", LastText: "time now, and (10-4)/2 please", Tools: both},
			wantCalls: []ToolCall{{Name: "current_time", Arguments: `{"timezone":"UTC"}`}, {Name: "calculator", Arguments: `{"expression":"(10-4)/2"}`}}},
		{name: "tool results", call: Call{LastRole: "tool", ToolResults: []string{`{"status":"ok","data":14}`, "12:00"}},
			wantText: `Here is what the tools returned: {"status":"ok","data":14}; 12:00`},
		{name: "plan", call: Call{LastRole: "user", LastText: "Plan a trip", Tools: []string{"write_todos"}},
			wantCalls: []ToolCall{{Name: "write_todos", Arguments: `{"todos":[{"content":"Outline the answer","status":"in_progress"},{"content":"Write the answer","status":"pending"}]}`}}},
		{name: "plan not offered", call: Call{LastRole: "user", LastText: "plan a trip", Tools: both},
			wantText: "Hello from the demo model. You said: plan a trip"},
		{name: "plan update", call: Call{LastRole: "tool", Tools: []string{"write_todos"},
			ToolResults: []string{`{"status":"ok","data":{"todos":[{"content":"Outline the answer","status":"in_progress"},{"content":"Write the answer","status":"pending"}]}}`}},
			wantCalls: []ToolCall{{Name: "write_todos", Arguments: `{"todos":[{"content":"Outline the answer","status":"completed"},{"content":"Write the answer","status":"in_progress"}]}`}}},
		{name: "plan done", call: Call{LastRole: "tool", Tools: []string{"write_todos"},
			ToolResults: []string{`{"status":"ok","data":{"todos":[{"content":"Outline the answer","status":"completed"},{"content":"Write the answer","status":"completed"}]}}`}},
			wantText: "Every step of the plan is completed: Outline the answer, then Write the answer."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			turn := DemoResponder(&tc.call)
			if turn.Text != tc.wantText || len(turn.ToolCalls) != len(tc.wantCalls) {
				t.Fatalf("turn %+v", turn)
			}
			for i, c := range tc.wantCalls {
				if turn.ToolCalls[i] != c {
					t.Fatalf("call %d: %+v, want %+v", i, turn.ToolCalls[i], c)
				}
			}
		})
	}
}

func TestCutRunes(t *testing.T) {
	t.Parallel()
	s := `{"k":"日本"}`
	var parts []string
	for p := 0; p < len(s); {
		e := cutRunes(s, p, 2)
		if e <= p {
			t.Fatalf("no progress at %d", p)
		}
		parts = append(parts, s[p:e])
		p = e
	}
	for _, p := range parts {
		if !utf8.ValidString(p) {
			t.Fatalf("fragment %q cuts a rune (all: %q)", p, parts)
		}
	}
	if join(parts) == "" || len(parts) < 4 {
		t.Fatalf("parts %q", parts)
	}
}

func FuzzAppendJSONString(f *testing.F) {
	f.Add("plain")
	f.Add("quote\" backslash\\ newline\n tab\t ctrl\x01 del\x7f")
	f.Add("日本語 🌍 \u2028")
	f.Add("bad \xff\xfe utf8 \xe6\x97")
	f.Fuzz(func(t *testing.T, s string) {
		out := jsonstring.Append(nil, s)
		if !gjson.ValidBytes(out) {
			t.Fatalf("invalid JSON %q", out)
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(s) && back != s {
			t.Fatalf("round trip %q → %q", s, back)
		}
		if !utf8.ValidString(s) && !utf8.ValidString(back) {
			t.Fatalf("invalid UTF-8 passed through: %q", back)
		}
	})
}

// As a tool selector the demo model picks the candidates a word of whose
// name the message holds (and the calculator for arithmetic), else the
// first; other requests are not selections.
func TestDemoToolSelection(t *testing.T) {
	t.Parallel()
	body := []byte(`{"response_format":{"type":"json_schema","json_schema":{"name":"tool_selection","schema":{"properties":{"tools":{"items":{"enum":["get_weather","send-email","calculator"]}}}}}}}`)
	for _, tc := range []struct{ text, want string }{
		{"Weather and email, please", `{"tools":["get_weather","send-email"]}`},
		{"what is 2+3*4?", `{"tools":["calculator"]}`},
		{"nothing fits", `{"tools":["get_weather"]}`},
	} {
		if got := DemoResponder(&Call{Body: body, LastRole: "user", LastText: tc.text}).Text; got != tc.want {
			t.Errorf("%q: %s, want %s", tc.text, got, tc.want)
		}
	}
	if _, ok := (&Call{Body: []byte(`{"response_format":{"type":"json_object"}}`)}).ToolSelection(); ok {
		t.Error("a json_object request taken for a selection")
	}
}
