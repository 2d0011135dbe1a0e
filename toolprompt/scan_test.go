package toolprompt

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestScannerSplitsTextAndBlock(t *testing.T) {
	t.Parallel()
	reply := "Let me check — ça va.\n```tool_calls\n[{\"name\":\"weather\",\"arguments\":{\"city\":\"Zürich\"}},{\"name\":\"time\",\"arguments\":\"{\\\"tz\\\":\\\"東京\\\"}\"}]\n```\nignored"
	for _, size := range []int{1, 2, 3, 7, len(reply)} {
		var sc Scanner
		var shown strings.Builder
		for i := 0; i < len(reply); i += size {
			shown.Write(sc.Feed([]byte(reply[i:min(i+size, len(reply))])))
		}
		tail, found, calls, err := sc.End()
		shown.Write(tail)
		if err != nil || !found {
			t.Fatalf("size %d: found %v err %v", size, found, err)
		}
		if shown.String() != "Let me check — ça va.\n" {
			t.Errorf("size %d: shown %q", size, shown.String())
		}
		if len(calls) != 2 || calls[0].Name != "weather" || string(calls[0].Args) != `{"city":"Zürich"}` ||
			calls[1].Name != "time" || string(calls[1].Args) != `{"tz":"東京"}` {
			t.Errorf("size %d: calls %+v", size, calls)
		}
	}
}

func TestScannerReleasesNonFenceBackticks(t *testing.T) {
	t.Parallel()
	var sc Scanner
	got := string(sc.Feed([]byte("code: ``")))
	got += string(sc.Feed([]byte("`go\nx\n```")))
	tail, found, _, _ := sc.End()
	got += string(tail)
	if found || got != "code: ```go\nx\n```" {
		t.Errorf("found %v, text %q", found, got)
	}
}

func TestParseBlockErrorsSayWhatToFix(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, block, want string }{
		{"not json", `[{"name":"x",`, "not valid JSON"},
		{"empty", ``, "empty"},
		{"scalar", `42`, "array"},
		{"no name", `[{"arguments":{}}]`, `call 1: "name"`},
		{"bad args", `[{"name":"a"},{"name":"b","arguments":[1]}]`, `call 2: "arguments"`},
		{"bad string args", `{"name":"b","arguments":"nope"}`, `"arguments" must be a JSON object`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseBlock([]byte(tc.block))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// An empty list is a reply without calls, not a malformed block.
func TestParseBlockEmptyListHasNoCalls(t *testing.T) {
	t.Parallel()
	if calls, err := ParseBlock([]byte(" [ ] ")); err != nil || len(calls) != 0 {
		t.Fatalf("calls %v, err %v", calls, err)
	}
}

// TestRenderedHistoryRoundTrips: the block the history is rendered with
// parses back to the same calls.
func TestRenderedHistoryRoundTrips(t *testing.T) {
	t.Parallel()
	calls := []Call{{Name: "weather", Args: []byte(`{"city":"Zürich","days":[1,2]}`)}, {Name: "noargs", Args: []byte(`{}`)}}
	var sc Scanner
	shown := sc.Feed(AppendBlock([]byte("thinking\n\n"), calls))
	if string(shown) != "thinking\n\n" {
		t.Errorf("shown %q", shown)
	}
	_, found, got, err := sc.End()
	if err != nil || !found || len(got) != 2 {
		t.Fatalf("found %v err %v calls %v", found, err, got)
	}
	for i := range calls {
		if got[i].Name != calls[i].Name || string(got[i].Args) != string(calls[i].Args) {
			t.Errorf("call %d: %s %s", i, got[i].Name, got[i].Args)
		}
	}
}

func FuzzScanner(f *testing.F) {
	f.Add([]byte("hi ```tool_calls\n[{\"name\":\"a\",\"arguments\":{}}]\n```"), uint8(3))
	f.Add([]byte("``` ``tool_calls {\"name\":\"x\",\"arguments\":\"{}\"}"), uint8(1))
	f.Add([]byte("```tool_calls\n[1,{}]"), uint8(2))
	f.Fuzz(func(t *testing.T, text []byte, size uint8) {
		n := int(size%16) + 1
		var sc Scanner
		var shown []byte
		for i := 0; i < len(text); i += n {
			shown = append(shown, sc.Feed(text[i:min(i+n, len(text))])...)
		}
		tail, found, calls, err := sc.End()
		shown = append(shown, tail...)
		// However the text is split, it reads as the whole text does.
		var whole Scanner
		wshown := append([]byte(nil), whole.Feed(text)...)
		wtail, wfound, wcalls, werr := whole.End()
		wshown = append(wshown, wtail...)
		if wfound != found || string(wshown) != string(shown) || len(wcalls) != len(calls) || (werr == nil) != (err == nil) {
			t.Fatalf("split by %d: found %v shown %q calls %d err %v; whole: found %v shown %q calls %d err %v",
				n, found, shown, len(calls), err, wfound, wshown, len(wcalls), werr)
		}
		if !found {
			if string(shown) != string(text) {
				t.Fatalf("no block, but shown %q != text %q", shown, text)
			}
			return
		}
		if !strings.HasPrefix(string(text), string(shown)) || sc.Released() != len(shown) {
			t.Fatalf("shown %q is not the text's start", shown)
		}
		if err == nil && len(calls) == 0 && !emptyList(text[len(shown):]) {
			// An empty list is a reply without calls (its text before the
			// block is the answer); any other block has calls or an error.
			t.Fatalf("a block without calls and without error: %q", text[len(shown):])
		}
		for _, c := range calls {
			if c.Name == "" || len(c.Args) == 0 || c.Args[0] != '{' {
				t.Fatalf("bad call %+v", c)
			}
		}
	})
}

func FuzzParseStructured(f *testing.F) {
	f.Add([]byte(`{"thought":"t","calls":[{"name":"a","arguments":{"x":1}}]}`))
	f.Add([]byte(`{"thought":"t","answer":"hi"}`))
	f.Add([]byte(`{"thought":"t","calls":[]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		answer, found, calls, err := parseStructured(b)
		if !found && (err != nil || len(calls) > 0) {
			t.Fatal("an answer with calls or an error")
		}
		if found && err == nil && len(calls) == 0 {
			t.Fatal("calls found but none parsed")
		}
		_ = answer
	})
}

// FuzzStructuredText: a reply given up on shows the reply itself, nothing,
// or an answer it holds; never the protocol's thought.
func FuzzStructuredText(f *testing.F) {
	f.Add([]byte(`Sure! {"thought":"secret","answer":"hi"}`))
	f.Add([]byte(`{x} {"thought":"secret","calls":[]}`))
	f.Add([]byte(`{"answer":{"a":[1,2]}}`))
	f.Add([]byte(`plain prose`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := structuredText(b)
		if got == nil || bytes.Equal(got, b) {
			return
		}
		if !bytes.Contains(b, []byte("answer")) && !bytes.Contains(b, []byte(`\u`)) {
			t.Fatalf("structuredText(%q) = %q: an answer from a reply without one", b, got)
		}
	})
}

// A call's arguments may hold Markdown code fences (a file's content, a
// snippet for a code tool): the block ends at the first fence outside a
// JSON string, not at one inside the arguments, split anywhere.
func TestScannerFenceInsideArguments(t *testing.T) {
	t.Parallel()
	reply := "Writing file.\n```tool_calls\n[{\"name\":\"write_file\",\"arguments\":{\"path\":\"a.md\",\"content\":\"# T\\n```python\\nprint(\\\"```\\\")\\n```\\n\"}}]\n```\nignored"
	for _, size := range []int{1, 3, 7, len(reply)} {
		var sc Scanner
		for i := 0; i < len(reply); i += size {
			sc.Feed([]byte(reply[i:min(i+size, len(reply))]))
		}
		_, found, calls, err := sc.End()
		if err != nil || !found || len(calls) != 1 || string(calls[0].Args) != "{\"path\":\"a.md\",\"content\":\"# T\\n```python\\nprint(\\\"```\\\")\\n```\\n\"}" {
			t.Fatalf("size %d: found %v err %v calls %+v", size, found, err, calls)
		}
	}
}

// The fence opens a block at the start of a line (indented three spaces
// at most, as in Markdown), or after text on its line when the calls
// follow it ('[' or '{' after whitespace): prose that mentions it is text, however the text
// is split.
func TestScannerFenceOnlyAtLineStart(t *testing.T) {
	t.Parallel()
	block := "```tool_calls\n[{\"name\":\"a\",\"arguments\":{}}]\n```"
	for _, tc := range []struct {
		reply string
		found bool
	}{
		{"To call tools, you write a block that starts with ```tool_calls and ends with ``` — that is the protocol.", false},
		{"Say ```tool_calls\n[{\"name\":\"a\"}]\n``` to call", true},
		{"Let me check the weather. " + block, true},
		{"Let me check. ```tool_calls [{\"name\":\"a\",\"arguments\":{}}]```", true},
		{"Let me check.\n\t" + block, true},
		{"    " + block, true},
		{"a ```tool_calls block ends with ```", false},
		{"ends with ```tool_calls", false},
		{"ends with ```tool_calls\n", false},
		{"ends with ```tool_calls\nand more", false},
		{block, true},
		{"   " + block, true},
		{"text\n" + block, true},
		{"text\n  " + block, true},
		{"mention ```tool_calls here\nthen\n" + block, true},
		// A fence whose label only starts with the protocol's is another
		// block: a config file shown in the answer.
		{"Here it is:\n```tool_calls_config\n{\"retries\": 3}\n```\nDone.", false},
		{"```tool_calls-v2 [1]\n```", false},
		{"```tool_calls2\n[{\"name\":\"a\",\"arguments\":{}}]\n```", false},
	} {
		for _, size := range []int{1, 2, 5, len(tc.reply)} {
			var sc Scanner
			var shown []byte
			for i := 0; i < len(tc.reply); i += size {
				shown = append(shown, sc.Feed([]byte(tc.reply[i:min(i+size, len(tc.reply))]))...)
			}
			tail, found, _, _ := sc.End()
			shown = append(shown, tail...)
			if found != tc.found || !found && string(shown) != tc.reply {
				t.Errorf("%q size %d: found %v, shown %q", tc.reply, size, found, shown)
			}
		}
	}
}

// emptyList reports whether block, a reply's text from its fence on, holds
// an empty JSON list of calls.
func emptyList(block []byte) bool {
	b := bytes.TrimPrefix(block, []byte(fenceOpen))
	if i := bytes.Index(b, []byte(fenceClose)); i >= 0 {
		b = b[:i]
	}
	v := gjson.ParseBytes(bytes.TrimSpace(b))
	return v.IsArray() && len(v.Array()) == 0
}
