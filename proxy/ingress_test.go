package proxy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/internal/fold"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
)

func TestParseChat(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body   string
		param        string // "" with ok = false means a 400 without param
		ok           bool
		stream, used bool
	}{
		{name: "minimal", body: `{"model":"m","messages":[{"role":"user","content":"x"}]}`, ok: true},
		{name: "stream with usage", body: `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"x"}]}`, ok: true, stream: true, used: true},
		{name: "stream null", body: `{"model":"m","stream":null,"messages":[{"role":"user","content":"x"}]}`, ok: true},
		{name: "empty", body: ``},
		{name: "not json", body: `{"model":"m",`},
		{name: "array", body: `[1]`},
		{name: "no model", body: `{"messages":[{"role":"user"}]}`, param: "model"},
		{name: "model number", body: `{"model":1,"messages":[{"role":"user"}]}`, param: "model"},
		{name: "empty model", body: `{"model":"","messages":[{"role":"user"}]}`, param: "model"},
		{name: "no messages", body: `{"model":"m"}`, param: "messages"},
		{name: "empty messages", body: `{"model":"m","messages":[]}`, param: "messages"},
		{name: "message not object", body: `{"model":"m","messages":["x"]}`, param: "messages"},
		{name: "message without role", body: `{"model":"m","messages":[{"content":"x"}]}`, param: "messages"},
		{name: "stream string", body: `{"model":"m","stream":"true","messages":[{"role":"user"}]}`, param: "stream"},
		{name: "include_usage string", body: `{"model":"m","stream":true,"stream_options":{"include_usage":"yes"},"messages":[{"role":"user"}]}`, param: "stream_options.include_usage"},
		{name: "include_usage null", body: `{"model":"m","stream":true,"stream_options":{"include_usage":null},"messages":[{"role":"user"}]}`, ok: true, stream: true},
		{name: "invalid UTF-8 in a string", body: "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"be \xff brief\"}]}"},
		{name: "a cut character", body: "{\"model\":\"m\",\"metadata\":{\"k\":\"\xc3\"},\"messages\":[{\"role\":\"user\"}]}"},
		{name: "stream_options without stream", body: `{"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"user"}]}`, param: "stream_options"},
		// A key given twice: gjson reads the first, upstreams often the last.
		{name: "model twice", body: `{"model":"m","messages":[{"role":"user"}],"model":"other"}`, param: "model"},
		{name: "messages twice", body: `{"model":"m","messages":[{"role":"user"}],"messages":[{"role":"system"}]}`, param: "messages"},
		{name: "model in other case", body: `{"model":"m","MODEL":"other","messages":[{"role":"user"}]}`, param: "MODEL"},
		{name: "model escaped", body: `{"model":"m","\u006dodel":"other","messages":[{"role":"user"}]}`, param: "model"},
		{name: "tools twice", body: `{"model":"m","tools":[],"tools":[{"type":"function"}],"messages":[{"role":"user"}]}`, param: "tools"},
		{name: "unknown key twice", body: `{"model":"m","temperature":0,"messages":[{"role":"user"}],"temperature":2}`, param: "temperature"},
		{name: "long key twice", body: `{"model":"m","` + strings.Repeat("k", 65) + `":1,"` + strings.Repeat("k", 65) + `":2,"messages":[{"role":"user"}]}`},
		{name: "many keys", body: `{"model":"m",` + manyKeys(40, "") + `"messages":[{"role":"user"}]}`, ok: true},
		{name: "many keys, one twice", body: `{"model":"m",` + manyKeys(40, "k3") + `"messages":[{"role":"user"}]}`, param: "k3"},
		// "ſ" (long s) folds to "s": an upstream decoding with encoding/json
		// reads "meſſages" as "messages".
		{name: "messages with a long s", body: `{"model":"m","messages":[{"role":"user"}],"meſſages":[{"role":"system"}]}`, param: "meſſages"},
		// Inside the body too: the guardrails and the tool policy read the
		// first "content" or "name", the upstream the last.
		{name: "content twice in a message", body: `{"model":"m","messages":[{"role":"user","content":"benign","content":"blocked"}]}`, param: "messages[0]"},
		{name: "role twice in a later message", body: `{"model":"m","messages":[{"role":"user"},{"role":"user","role":"system"}]}`, param: "messages[1]"},
		{name: "text twice in a part", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","text":"b"}]}]}`, param: "messages[0].content[0]"},
		{name: "tool name twice", body: `{"model":"m","tools":[{"type":"function","function":{"name":"ok","name":"secret"}}],"messages":[{"role":"user"}]}`, param: "tools[0].function"},
		{name: "inner key escaped", body: `{"model":"m","messages":[{"role":"user","content":"a","\u0063ontent":"b"}]}`, param: "messages[0]"},
		// Upstreams decoding with Go's encoding/json read "Content" as
		// "content": the request's structure compares without case, the
		// client's own data (metadata, schemas) exactly.
		{name: "content in two cases", body: `{"model":"m","messages":[{"role":"user","content":"benign","Content":"blocked"}]}`, param: "messages[0]"},
		{name: "part text in two cases", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a","TEXT":"b"}]}]}`, param: "messages[0].content[0]"},
		{name: "metadata keys differing in case", body: `{"model":"m","metadata":{"ID":"1","id":"2"},"messages":[{"role":"user"}]}`, ok: true},
		{name: "schema properties differing in case", body: `{"model":"m","response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"object","properties":{"ID":{},"id":{}}}}},"messages":[{"role":"user"}]}`, ok: true},
		{name: "inner keys differing in case", body: `{"model":"m","messages":[{"role":"user"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"ID":{},"id":{}}}}}]}`, ok: true},
		{name: "many inner keys, one twice", body: `{"model":"m","metadata":{` + manyKeys(40, "k7") + `"z":1},"messages":[{"role":"user"}]}`, param: "metadata"},
		{name: "many inner keys", body: `{"model":"m","metadata":{` + manyKeys(40, "") + `"z":1},"messages":[{"role":"user"}]}`, ok: true},
		// A key of the request given once, in another case: read as spelt
		// here ("Tools" is no tools: the server tools' reserved names
		// went unchecked, and the gateway added its own "tools" beside
		// it), as the key by an upstream that matches keys without case.
		{name: "tools in another case", body: `{"model":"m","Tools":[{"type":"function","function":{"name":"calculator"}}],"messages":[{"role":"user"}]}`, param: "tools"},
		{name: "stream in another case", body: `{"model":"m","Stream":true,"messages":[{"role":"user"}]}`, param: "stream"},
		{name: "tool_choice in another case", body: `{"model":"m","Tool_Choice":"required","messages":[{"role":"user"}]}`, param: "tool_choice"},
		{name: "max_tokens with a Kelvin sign", body: "{\"model\":\"m\",\"max_to\u212aens\":9999,\"messages\":[{\"role\":\"user\"}]}", param: "max_tokens"},
		{name: "a function's name in another case", body: `{"model":"m","tools":[{"type":"function","function":{"Name":"calculator"}}],"messages":[{"role":"user"}]}`, param: "tools[0].function"},
		{name: "a tool's function in another case", body: `{"model":"m","tools":[{"type":"function","Function":{"name":"calculator"}}],"messages":[{"role":"user"}]}`, param: "tools[0]"},
		{name: "tool_choice's function name in another case", body: `{"model":"m","tool_choice":{"type":"function","function":{"Name":"zz"}},"messages":[{"role":"user"}]}`, param: "tool_choice.function"},
		{name: "a message's content in another case", body: `{"model":"m","messages":[{"role":"user","Content":"blocked"}]}`, param: "messages[0]"},
		{name: "a part's text in another case", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","Text":"blocked"}]}]}`, param: "messages[0].content[0]"},
		{name: "a call's arguments in another case", body: `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","Arguments":"{}"}}]}]}`, param: "messages[0].tool_calls[0].function"},
		// A tool_choice of OpenAI's types is read by its parts.
		{name: "tool_choice function name a number", body: `{"model":"m","tool_choice":{"type":"function","function":{"name":5}},"messages":[{"role":"user"}]}`, param: "tool_choice.function.name"},
		{name: "tool_choice function without function", body: `{"model":"m","tool_choice":{"type":"function"},"messages":[{"role":"user"}]}`, param: "tool_choice.function.name"},
		{name: "tool_choice allowed_tools not an object", body: `{"model":"m","tool_choice":{"type":"allowed_tools","allowed_tools":5},"messages":[{"role":"user"}]}`, param: "tool_choice.allowed_tools.mode"},
		{name: "tool_choice allowed_tools without tools", body: `{"model":"m","tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"auto"}},"messages":[{"role":"user"}]}`, param: "tool_choice.allowed_tools.tools"},
		{name: "tool_choice a number", body: `{"model":"m","tool_choice":1,"messages":[{"role":"user"}]}`, param: "tool_choice"},
		{name: "tool_choice of a provider's own", body: `{"model":"m","tool_choice":"any","messages":[{"role":"user"}]}`, ok: true},
		{name: "tool_choice allowed_tools", body: `{"model":"m","tool_choice":{"type":"allowed_tools","allowed_tools":{"mode":"required","tools":[{"type":"function","function":{"name":"f"}}]}},"messages":[{"role":"user"}]}`, ok: true},
		{name: "tool_choice of another type", body: `{"model":"m","tool_choice":{"type":"web_search"},"messages":[{"role":"user"}]}`, ok: true},
		{name: "a provider's own member of a message", body: `{"model":"m","messages":[{"role":"user","content":"x","provider_ext":{"Name":"x","Data":1}}]}`, ok: true},
		{name: "a message's own key that is a part's", body: `{"model":"m","messages":[{"role":"user","content":"x","Data":1}]}`, ok: true},
		{name: "keys of no OpenAI field in any case", body: `{"model":"m","myExtension":{"Mode":1},"X-Trace":"t","messages":[{"role":"user"}]}`, ok: true},
		{name: "client data keys in any case", body: `{"model":"m","metadata":{"Name":"x"},"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"Name":{"type":"string"},"Type":{}}}}}],"messages":[{"role":"user"}]}`, ok: true},
		{name: "many keys, messages with a long s", body: `{"model":"m","messages":[{"role":"user"}],` + manyKeys(40, "") + `"meſſages":[{"role":"system"}]}`, param: "meſſages"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in, err := parseChat([]byte(c.body))
			if c.ok {
				if err != nil || in.model != "m" || in.stream != c.stream || in.includeUsage != c.used {
					t.Fatalf("got %+v, %v", in, err)
				}
				return
			}
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Status != 400 || pe.Param != c.param {
				t.Fatalf("got %v, want a 400 naming %q", err, c.param)
			}
		})
	}
}

// FuzzParseChat: any body is either accepted with a model and at least one
// message, or refused with a 400; never a panic.
func FuzzParseChat(f *testing.F) {
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"user","content":"x"}]}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"é"}]}`,
		`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
		`{"model":"m","tools" : [ {"type":"function"} ],"tools":[],"messages":[{"role":"user"}]}`,
		`{"model":"m","Model":"n","messages":[{"role":"user"}]}`,
		`{"model":"m","tools":null,"tools":[1],"messages":[{"role":"user"}]}`,
		`{"model":`, `[]`, `null`, `{"model":"\u0000","messages":[{"role":""}]}`, "\xff\xfe",
		`{"model":"m","Tools":[],"messages":[{"role":"user","Content":"x"}]}`,
		`{"model":"m","tools":[{"type":"function","function":{"Name":"f"}}],"messages":[{"role":"user"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in, err := parseChat(body)
		if err != nil {
			var pe *pipeline.Error
			if !errors.As(err, &pe) || pe.Status != 400 {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if in.model == "" {
			t.Fatal("accepted without a model")
		}
		if !utf8.Valid(body) {
			t.Fatal("accepted a body that is not UTF-8")
		}
		if in.includeUsage && !in.stream {
			t.Fatal("include_usage without stream")
		}
		var seen []string
		gjson.ParseBytes(body).ForEach(func(k, v gjson.Result) bool {
			for _, s := range seen {
				if strings.EqualFold(s, k.Str) {
					t.Fatalf("accepted a body that repeats the key %q", k.Str)
				}
			}
			seen = append(seen, k.Str)
			if want := topSpelling[fold.Key(k.Str)]; want != "" && want != k.Str {
				t.Fatalf("accepted %q, an OpenAI field in another case", k.Str)
			}
			if repeatsInside(v, maxKeyDepth) {
				t.Fatalf("accepted a body whose %q repeats a key inside", k.Str)
			}
			return true
		})
		if want := gjson.GetBytes(body, "tools"); string(in.tools) != map[bool]string{true: want.Raw}[want.IsArray()] {
			t.Fatalf("tools %q, gjson reads %q", in.tools, want.Raw)
		}
	})
}

func TestMapErrorNeverLeaksCauses(t *testing.T) {
	t.Parallel()
	secret := errors.New("dial tcp 10.0.0.1:443: sk-live-secret")
	cases := []error{
		secret,
		&pipeline.UpstreamError{Kind: pipeline.UpstreamConnect, Err: secret},
		&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 500, Body: []byte("<html>sk-live-secret</html>")},
		&pipeline.Error{Status: 400, Type: "invalid_request_error", Message: "bad", Err: secret},
	}
	for _, err := range cases {
		env := mapError(err)
		if string(env.body) == "" || containsAny(env.body, "sk-live-secret", "10.0.0.1") {
			t.Fatalf("%v → %s", err, env.body)
		}
	}
	if env := mapError(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 400, Body: []byte(`{"error":{"message":"bad temperature","type":"invalid_request_error","code":null,"param":"temperature"}}`)}); env.status != 400 || !containsAny(env.body, "bad temperature", `"param":"temperature"`) {
		t.Fatalf("upstream envelope: %d %s", env.status, env.body)
	}
	// A rate limit or quota error is about the gateway's one provider
	// account, which every tenant shares: its status and code pass, its
	// text (the account's org id, its limit and use) does not, in a 429 or
	// in an error event of a 200 stream.
	for _, ue := range []*pipeline.UpstreamError{
		{Kind: pipeline.UpstreamStatus, Status: 429, Body: []byte(`{"error":{"message":"Rate limit reached for gpt-4o in organization org-SECRET on tokens per min (TPM): Limit 30000, Used 29999","type":"tokens","code":"rate_limit_exceeded","param":null}}`)},
		{Kind: pipeline.UpstreamStatus, Status: 200, Body: []byte(`{"error":{"message":"org-SECRET exceeded its quota","type":"insufficient_quota","code":"insufficient_quota","param":null}}`)},
	} {
		env := mapError(ue)
		if containsAny(env.body, "org-SECRET", "30000") || !containsAny(env.body, "the upstream provider", `"code":"`) {
			t.Fatalf("rate limit envelope: %d %s", env.status, env.body)
		}
	}
}

func containsAny(b []byte, subs ...string) bool {
	for _, s := range subs {
		for i := 0; i+len(s) <= len(b); i++ {
			if string(b[i:i+len(s)]) == s {
				return true
			}
		}
	}
	return false
}

func TestSetModel(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, model, want string }{
		{`{"id":"x","model":"up","choices":[]}`, "gpt-x", `{"id":"x","model":"gpt-x","choices":[]}`},
		{`{"id":"x","model":"gpt-x"}`, "gpt-x", `{"id":"x","model":"gpt-x"}`},
		{`{"model":"a"}`, `we"ird/é`, `{"model":"we\"ird/é"}`},
		// An upstream that sends no model, or one that is not a string
		// (its deployment's object, a number), does not show it: the
		// client sees the name it asked for.
		{`{"id":"x"}`, "gpt-x", `{"model":"gpt-x","id":"x"}`},
		{`{ }`, "gpt-x", `{"model":"gpt-x" }`},
		{`{"model":{"internal":"dep-7"},"id":"x"}`, "gpt-x", `{"model":"gpt-x","id":"x"}`},
		{`{"id":"x","model":7}`, "gpt-x", `{"id":"x","model":"gpt-x"}`},
		{`{"id":"x","model":null}`, "gpt-x", `{"id":"x","model":"gpt-x"}`},
		{`[1]`, "gpt-x", `[1]`},
		{" \n{\"id\":\"x\"}", "gpt-x", " \n{\"model\":\"gpt-x\",\"id\":\"x\"}"},
	}
	for _, c := range cases {
		if got := string(setModel(nil, []byte(c.in), c.model)); got != c.want {
			t.Errorf("setModel(%s, %q) = %s, want %s", c.in, c.model, got, c.want)
		}
	}
}

// manyKeys writes n distinct keys "k0".."k<n-1>", then again the key
// repeat when it is not "".
func manyKeys(n int, repeat string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `"k%d":%d,`, i, i)
	}
	if repeat != "" {
		fmt.Fprintf(&b, `%q:0,`, repeat)
	}
	return b.String()
}

// repeatsInside reports, the slow way, whether an object in v gives a key
// twice.
func repeatsInside(v gjson.Result, depth int) bool {
	found := false
	if depth == 0 {
		return false
	}
	if v.IsObject() {
		seen := map[string]bool{}
		v.ForEach(func(k, e gjson.Result) bool {
			found = seen[k.Str] || repeatsInside(e, depth-1)
			seen[k.Str] = true
			return !found
		})
	} else if v.IsArray() {
		v.ForEach(func(_, e gjson.Result) bool {
			found = repeatsInside(e, depth-1)
			return !found
		})
	}
	return found
}

// A key the upstream quotes back across the point where a field is cut is
// masked whole, not cut to a prefix that no longer matches.
func TestMapErrorMasksAKeyCutByTheBound(t *testing.T) {
	t.Parallel()
	const secret = "sk-upstream-cut-secret-0123456789abcdef"
	observe.Secrets.Add(secret)
	for _, c := range []struct {
		field string
		pad   int
	}{{"message", 1024 - 20}, {"type", 64 - 20}, {"code", 64 - 20}, {"param", 64 - 20},
		{"message", 1024 - 4}, {"type", 64 - 4}, {"code", 64 - 4}, {"param", 64 - 4}} {
		body := `{"error":{"` + c.field + `":"` + strings.Repeat("x", c.pad) + secret + `"}}`
		env := mapError(&pipeline.UpstreamError{Kind: pipeline.UpstreamStatus, Status: 400, Body: []byte(body)})
		if containsAny(env.body, secret[:20]) {
			t.Errorf("%s: a prefix of the key reached the client: %s", c.field, env.body)
		}
		// Nor half a mask: the cut takes it whole.
		if v := gjson.GetBytes(env.body, "error."+c.field).Str; strings.Contains(v, "[RED") && !strings.HasSuffix(v, observe.Mask) {
			t.Errorf("%s: the cut split the mask: %q", c.field, v)
		}
	}
}
