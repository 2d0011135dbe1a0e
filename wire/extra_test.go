package wire

import (
	"testing"

	"github.com/tidwall/gjson"
)

// Members of a message's deltas (Add): arrays joined, objects replaced,
// scalars (a per-chunk token_id), nulls and empty ones left out. Top-level
// members (Set): the last value, scalars too. At most maxMembers keys.
func TestMembers(t *testing.T) {
	t.Parallel()
	var m Members
	for _, kv := range [][2]string{
		{"annotations", `[{"type":"url_citation","url_citation":{"start_index":0,"end_index":3}}]`},
		{"audio", `null`},
		{"annotations", `[]`},
		{"token_id", `7`},
		{"details", `{"a":1}`},
		{"annotations", ` [ {"type":"file_citation"} ] `},
		{"details", `{"a":2}`},
		{"empty", `{}`},
		{"token_id", `8`},
	} {
		m.Add(kv[0], gjson.Parse(kv[1]))
	}
	got := string(m.AppendJSON(nil, 2))
	want := `"annotations":[{"type":"url_citation","url_citation":{"start_index":2,"end_index":5}},{"type":"file_citation"}],"details":{"a":2}`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	m.Reset()
	if m.Size() != 0 || len(m.AppendJSON(nil, 0)) != 0 {
		t.Fatal("Reset left members")
	}
	for _, v := range []string{`"a"`, `["x"]`, `["y"]`, `null`} {
		m.Set("provider", gjson.Parse(v))
	}
	if got := string(m.AppendJSON(nil, 0)); got != `"provider":["y"]` {
		t.Fatalf("set: %s", got)
	}
	m.Reset()
	for i := range 3 * maxMembers {
		m.Set("k"+string(rune('A'+i)), gjson.Parse(`1`))
	}
	if n := len(gjson.Parse("{" + string(m.AppendJSON(nil, 0)) + "}").Map()); n != maxMembers {
		t.Fatalf("%d members kept, bound %d", n, maxMembers)
	}
}

// ChatSSE sends an Extra event's members as a delta of their own before
// the finish, and a Finish event's top-level members on the finish chunk;
// ChatJSON puts them in the message and the object.
func TestExtraBothForms(t *testing.T) {
	t.Parallel()
	h := Header{ID: "c", Created: 1, Model: "m"}
	events := []Event{{Kind: Role}, {Kind: Text, Key: "content", Text: []byte("hi")},
		{Kind: Extra, Raw: []byte(`"annotations":[{"type":"x"}]`)}, {Kind: Finish, Finish: "stop", Raw: []byte(`"citations":["u"]`)}, {Kind: End}}
	sse, js := NewChatSSE(h), NewChatJSON(h)
	var chunks []string
	var out []byte
	for i := range events {
		if c := sse.Encode(nil, &events[i]); len(c) > 0 {
			chunks = append(chunks, string(c))
		}
		out = js.Encode(out, &events[i])
	}
	if len(chunks) != 4 || gjson.Get(chunks[2], "choices.0.delta.annotations.0.type").Str != "x" || !gjson.Valid(chunks[2]) {
		t.Fatalf("chunks %q", chunks)
	}
	if gjson.Get(chunks[3], "citations.0").Str != "u" || !gjson.Valid(chunks[3]) {
		t.Fatalf("finish chunk %s", chunks[3])
	}
	if gjson.GetBytes(out, "choices.0.message.annotations.0.type").Str != "x" || gjson.GetBytes(out, "citations.0").Str != "u" || !gjson.ValidBytes(out) {
		t.Fatalf("JSON %s", out)
	}
}

// FuzzMembers: members of any values, the annotations of any shape, make
// valid JSON members (the object they go in is valid), and an array of
// annotations keeps its items.
func FuzzMembers(f *testing.F) {
	f.Add("annotations", []byte(`[{"type":"url_citation","url_citation":{"start_index":1,"end_index":2}}]`), []byte(`[{"type":"url_citation"}]`), 3)
	f.Add("x", []byte(`{"a":1}`), []byte(`null`), -4)
	f.Add("annotations", []byte(`[1,[2],"3"]`), []byte(`[{"type":"url_citation","url_citation":{"start_index":"a","end_index":1e400}}]`), 1)
	f.Fuzz(func(t *testing.T, key string, a, b []byte, shift int) {
		if !gjson.ValidBytes(a) || !gjson.ValidBytes(b) {
			return
		}
		var m Members
		m.Add(key, gjson.ParseBytes(a))
		m.Add(key, gjson.ParseBytes(b))
		obj := append(append([]byte{'{'}, m.AppendJSON(nil, shift)...), '}')
		if !gjson.ValidBytes(obj) {
			t.Fatalf("%q %q %q: %s", key, a, b, obj)
		}
		if arr := gjson.ParseBytes(a); arr.IsArray() {
			if got := gjson.ParseBytes(ShiftAnnotations(a, shift)); len(got.Array()) != len(arr.Array()) {
				t.Fatalf("%q: %d items, want %d", a, len(got.Array()), len(arr.Array()))
			}
		}
	})
}

// "tool_calls": null (SGLang, LiteLLM, Mistral write it on every message and
// delta) is no call: decoding a completion or a chunk with it starts none.
func TestNullToolCallsAreNone(t *testing.T) {
	t.Parallel()
	var kinds []Kind
	DecodeCompletion([]byte(`{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":null},"finish_reason":"stop"}]}`),
		func(e *Event) { kinds = append(kinds, e.Kind) })
	var d ChunkDecoder
	d.Decode([]byte(`{"id":"c","choices":[{"index":0,"delta":{"content":"x","tool_calls":null},"finish_reason":null}]}`),
		func(e *Event) { kinds = append(kinds, e.Kind) })
	for _, k := range kinds {
		if k == CallHeader || k == CallArgs {
			t.Fatalf("a call from a null: %v", kinds)
		}
	}
}

// A completion whose calls come without a finish reason decodes to a
// "tool_calls" finish (a stream made of it ends as the JSON answer does);
// without calls, the reason stays for the encoder ("stop").
func TestDecodeCompletionCallsFinish(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"choices":[{"index":0,"message":{"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":""}]}`:     "tool_calls",
		`{"choices":[{"index":0,"message":{"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`:                        "tool_calls",
		`{"choices":[{"index":0,"message":{"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"stop"}]}`: "stop",
		`{"choices":[{"index":0,"message":{"content":"x","tool_calls":null},"finish_reason":""}]}`:                                                          "",
	} {
		got := "?"
		DecodeCompletion([]byte(body), func(e *Event) {
			if e.Kind == Finish {
				got = e.Finish
			}
		})
		if got != want {
			t.Errorf("%s: finish %q, want %q", body, got, want)
		}
	}
}
