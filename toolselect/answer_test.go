package toolselect

import (
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

func TestParseAnswer(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		content string
		want    []string
		ok      bool
	}{
		{name: "object", content: `{"tools":["a","b"]}`, want: []string{"a", "b"}, ok: true},
		{name: "bare array", content: ` ["a"] `, want: []string{"a"}, ok: true},
		{name: "fenced", content: "```json\n{\"tools\":[\"a\"]}\n```", want: []string{"a"}, ok: true},
		{name: "empty list", content: `{"tools":[]}`, ok: true},
		{name: "prose", content: `I would use a and b.`},
		{name: "no tools key", content: `{"names":["a"]}`},
		{name: "tools not an array", content: `{"tools":"a"}`},
		{name: "not strings", content: `{"tools":["a",1]}`},
		{name: "truncated", content: `{"tools":["a"`},
		{name: "empty", content: ``},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, ok := parseAnswer(tc.content)
			if ok != tc.ok || (ok && !slices.Equal(got, tc.want)) {
				t.Fatalf("parseAnswer(%q) = %q, %v; want %q, %v", tc.content, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// Unknown names are dropped, repeats counted once, and no more than max
// are kept, in the selector's order.
func TestValidNames(t *testing.T) {
	t.Parallel()
	cands := []candidate{{name: "a"}, {name: "b"}, {name: "c"}, {name: "d"}}
	got := validNames([]string{"zz", "c", "c", "a", "nope", "d", "b"}, cands, 3)
	if want := []string{"c", "a", "d"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := validNames(nil, cands, 3); len(got) != 0 {
		t.Fatalf("got %q from nothing", got)
	}
}

// The selector's request is valid JSON that lists every candidate in the
// schema's enum and in the system message, carries the user's text as the
// user message, and is recognised by mockllm (whose demo model picks by
// name), so the demo config can select tools offline.
func TestRequestBodyRecognisedByMock(t *testing.T) {
	t.Parallel()
	cands := []candidate{{"get_weather", "Weather \"now\"\nin a city"}, {"current_time", ""}, {"calculator", strings.Repeat("é", 400)}}
	body := requestBody("picker", cands, "What time is it in Oslo?", 1, 2)
	if !gjson.ValidBytes(body) {
		t.Fatalf("invalid JSON: %s", body)
	}
	sys := gjson.GetBytes(body, "messages.0.content").Str
	if !strings.Contains(sys, "- get_weather: Weather \"now\" in a city\n") || !strings.Contains(sys, "at least 1 and at most 2") {
		t.Fatalf("system message %q", sys)
	}
	if d := gjson.GetBytes(body, "messages.0.content").Str; strings.Count(d, "é") > maxDescription/2 {
		t.Fatal("a description was not bounded")
	}
	c := &mockllm.Call{Body: body, LastRole: "user", LastText: gjson.GetBytes(body, "messages.1.content").Str}
	got, ok := c.ToolSelection()
	if !ok || !slices.Equal(got, []string{"get_weather", "current_time", "calculator"}) {
		t.Fatalf("mock saw %q, %v", got, ok)
	}
	names, ok := parseAnswer(mockllm.DemoResponder(c).Text)
	if !ok || !slices.Equal(names, []string{"current_time"}) {
		t.Fatalf("demo selector picked %q, %v", names, ok)
	}
}

func FuzzParseAnswer(f *testing.F) {
	for _, s := range []string{`{"tools":["a","b"]}`, `["a"]`, "```json\n[\"a\"]\n```", "```", `{"tools":[1]}`, "", "\x00"} {
		f.Add(s)
	}
	cands := []candidate{{name: "a"}, {name: "b"}}
	f.Fuzz(func(t *testing.T, content string) {
		names, _ := parseAnswer(content)
		picks := validNames(names, cands, 1)
		if len(picks) > 1 || (len(picks) == 1 && picks[0] != "a" && picks[0] != "b") {
			t.Fatalf("picks %q", picks)
		}
		if again, ok := parseAnswer(string(appendNames(nil, picks))); !ok || !slices.Equal(again, picks) {
			t.Fatalf("cached picks %q do not read back: %q", picks, again)
		}
	})
}
