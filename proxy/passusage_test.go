package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// tapAll feeds body to a new tap in pieces of n bytes.
func tapAll(contentType, body string, n int) *usageTap {
	u := newUsageTap([]byte(contentType))
	for b := []byte(body); len(b) > 0; {
		k := min(n, len(b))
		u.write(b[:k])
		b = b[k:]
	}
	return u
}

// The tap reads the usage a pass-through answer reports, whatever the
// pieces the body arrives in: the top-level usage of a JSON answer (not a
// "usage" inside its data or its strings), the last usage of an SSE
// answer's data lines, in the chat form or the Responses form.
func TestUsageTapFindsTheAnswersUsage(t *testing.T) {
	long := strings.Repeat(`{"usage":{"prompt_tokens":999}},`, 200)
	image := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", 3*maxUsageLine/24) // a base64 image three times the line bound
	for _, tc := range []struct {
		name, ct, body string
		want           wire.ChatUsage
		ok             bool
	}{
		{"embeddings", "application/json", `{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,-2e-3]}],"model":"e","usage":{"prompt_tokens":8,"total_tokens":8}}`,
			wire.ChatUsage{Prompt: 8, Total: 8}, true},
		{"nested and quoted usage first", "application/json; charset=utf-8",
			`{"data":[` + long + `{"text":"\"usage\":{\"prompt_tokens\":5}","usage":{"prompt_tokens":6}}], "usage" : {"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`,
			wire.ChatUsage{Prompt: 3, Completion: 4, Total: 7}, true},
		{"the first of two", "application/json", `{"usage":{"prompt_tokens":1},"usage":{"prompt_tokens":2}}`, wire.ChatUsage{Prompt: 1}, true},
		{"responses form", "application/json", `{"object":"response","output":[],"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":4},"output_tokens":6,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":16}}`,
			wire.ChatUsage{Prompt: 10, Cached: 4, Completion: 6, Reasoning: 2, HasReasoning: true, Total: 16}, true},
		{"usage null", "application/json", `{"usage":null,"x":{"a":1}}`, wire.ChatUsage{}, false},
		{"none", "application/json", `{"data":[{"usage":{"prompt_tokens":9}}]}`, wire.ChatUsage{}, false},
		{"a top-level array", "application/json", `[{"usage":{"prompt_tokens":9}}]`, wire.ChatUsage{}, false},
		{"cut inside the usage", "application/json", `{"usage":{"prompt_tokens":9`, wire.ChatUsage{}, false},
		{"too large", "application/json", `{"usage":{"prompt_tokens":9,"pad":"` + strings.Repeat("x", maxUsageBytes) + `"}}`, wire.ChatUsage{}, false},
		{"completions stream", "text/event-stream", "data: {\"choices\":[{\"text\":\"usage\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\r\n\r\ndata: [DONE]\n\n",
			wire.ChatUsage{Prompt: 5, Completion: 2, Total: 7}, true},
		{"responses stream", "text/event-stream; charset=utf-8",
			"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1,\"total_tokens\":4}}}\n\n",
			wire.ChatUsage{Prompt: 3, Completion: 1, Total: 4}, true},
		{"stream without usage", "text/event-stream", "data: {\"n\":1}\n\ndata: [DONE]\n\n", wire.ChatUsage{}, false},
		// Without usage, the output a stream carried is guessed at four
		// bytes a token.
		{"completions stream without usage", "text/event-stream",
			"data: {\"choices\":[{\"text\":\"abcdefgh\"}]}\n\ndata: {\"choices\":[{\"text\":\"ijkl\"},{\"delta\":{\"content\":\"mnop\"}}]}\n\ndata: [DONE]\n\n",
			wire.ChatUsage{Completion: 4}, false},
		{"a cut Responses stream", "text/event-stream", "data: {\"type\":\"response.output_text.delta\",\"delta\":\"abcdef\"}\n\n", wire.ChatUsage{Completion: 2}, false},
		// An event line over maxUsageLine (a whole image in it) is scanned
		// as it passes, for both forms.
		{"an image event over the line bound", "text/event-stream",
			"data: {\"type\":\"image_generation.completed\",\"b64_json\":\"" + image + "\",\"usage\":{\"input_tokens\":50,\"output_tokens\":4160,\"total_tokens\":4210}}\n\n",
			wire.ChatUsage{Prompt: 50, Completion: 4160, Total: 4210}, true},
		{"a completed response over the line bound", "text/event-stream",
			"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"output\":[{\"type\":\"image_generation_call\",\"result\":\"" + image +
				"\",\"usage\":{\"input_tokens\":1}}],\"usage\":{\"input_tokens\":7,\"output_tokens\":9,\"total_tokens\":16}}}\n\n",
			wire.ChatUsage{Prompt: 7, Completion: 9, Total: 16}, true},
		{"a long line's usage, then a later one", "text/event-stream",
			"data: {\"b64_json\":\"" + image + "\",\"usage\":{\"input_tokens\":1}}\n\n: " + image + "\n\ndata: {\"usage\":{\"prompt_tokens\":2}}\n\n",
			wire.ChatUsage{Prompt: 2}, true},
		{"a later response with the usage, over the line bound", "text/event-stream",
			"data: {\"response\":{\"id\":\"a\",\"x\":\"" + image + "\"},\"response\":{\"usage\":{\"input_tokens\":5}}}\n\n",
			wire.ChatUsage{Prompt: 5}, true},
		{"usage only inside a long line's content", "text/event-stream",
			"data: {\"response\":{\"output\":[{\"usage\":{\"input_tokens\":1},\"result\":\"" + image + "\"}]},\"x\":{\"usage\":{\"input_tokens\":2}}}\n\n",
			wire.ChatUsage{}, false},
	} {
		for _, n := range []int{1, 7, 1 << 20} {
			got, ok := tapAll(tc.ct, tc.body, n).usage()
			if ok != tc.ok || got != tc.want {
				t.Errorf("%s, in %d-byte pieces: %+v %v, want %+v %v", tc.name, n, got, ok, tc.want, tc.ok)
			}
		}
	}
}

// A JSON answer's tap is settled once nothing later can change its result:
// so a pass-through whose client left stops draining the answer there.
func TestUsageTapSettles(t *testing.T) {
	for _, tc := range []struct {
		head    string
		settled bool
	}{
		{`{"usage":{"prompt_tokens":1`, false},
		{`{"usage":{"prompt_tokens":1}}`, true},
		{`{"usage":null,`, true},
		{`{"usage":{"pad":"` + strings.Repeat("x", maxUsageBytes) + `"`, true},
		{`{"data":[{"usage":{}}],`, false},
		{`{"us\u0061ge":1,`, true},
	} {
		if got := tapAll("application/json", tc.head, 5).settled(); got != tc.settled {
			t.Errorf("%q: settled %v, want %v", tc.head, got, tc.settled)
		}
	}
}

// An answer that is neither JSON nor SSE (audio, an image) is not read.
func TestUsageTapOnlyForJSONAndSSE(t *testing.T) {
	for ct, want := range map[string]bool{"application/json": true, "Application/JSON; charset=utf-8": true, "": true,
		"text/event-stream": true, "audio/mpeg": false, "image/png": false, "application/octet-stream": false} {
		if got := newUsageTap([]byte(ct)) != nil; got != want {
			t.Errorf("%q: tap %v, want %v", ct, got, want)
		}
	}
}

// FuzzUsageTap: on any bytes, in any pieces, the tap never fails and never
// keeps more than its bound; on a JSON answer it finds what gjson finds
// under "usage", or nothing, and it finds it whenever the usage is an
// object within the bound and the body has no escapes (an escaped key is
// the one case the byte scan does not read as gjson does).
func FuzzUsageTap(f *testing.F) {
	f.Add(`{"model":"e","usage":{"prompt_tokens":8,"total_tokens":8}}`, 3)
	f.Add(`{"a":"usage","b":{"usage":{"x":1}},"usage":{"prompt_tokens":1}}`, 1)
	f.Add(`{"us\u0061ge":{"prompt_tokens":1}}`, 2)
	f.Add(`{"usage":[{"prompt_tokens":1}],"usage":{"x":"}"}}`, 5)
	f.Add(`{"us\u0061ge":[1],"usage":{"prompt_tokens":1}}`, 4)
	f.Add(`{"response":{"a":{"usage":{"x":2}},"usage":{"input_tokens":1}},"response":{"usage":{}}}`, 3)
	f.Add(`{"response":[{"usage":{}}],"usage":{"y":1}}`, 2)
	f.Add(`{"response":{},"response":{"usage":{}}}`, 1)
	f.Add(`{"response":{"usage":null},"response":{"usage":{"a":3}}}`, 2)
	f.Fuzz(func(t *testing.T, body string, n int) {
		if n <= 0 {
			n = 1
		}
		u := tapAll("application/json", body, n)
		if len(u.found) > maxUsageBytes {
			t.Fatalf("kept %d bytes", len(u.found))
		}
		_, _ = u.usage()
		if !gjson.Valid(body) {
			return
		}
		want := gjson.Get(body, "usage")
		if u.captured && string(u.found) != want.Raw {
			t.Fatalf("%q: found %q, gjson %q", body, u.found, want.Raw)
		}
		if want.IsObject() && len(want.Raw) <= maxUsageBytes && !strings.Contains(body, `\`) && !u.captured {
			t.Fatalf("%q: missed %q", body, want.Raw)
		}
		// The path form, as a long SSE line's Responses event is read.
		r := &usageTap{path: responseUsagePath}
		for b := []byte(body); len(b) > 0; b = b[min(n, len(b)):] {
			r.scan(b[:min(n, len(b))])
		}
		want = gjson.Get(body, "response.usage")
		if r.captured && string(r.found) != want.Raw {
			t.Fatalf("%q: found %q under response, gjson %q", body, r.found, want.Raw)
		}
		if want.IsObject() && len(want.Raw) <= maxUsageBytes && !strings.Contains(body, `\`) && !r.captured {
			t.Fatalf("%q: missed %q under response", body, want.Raw)
		}
		s := tapAll("text/event-stream", "data: "+strings.ReplaceAll(body, "\n", " ")+"\n", n)
		if _, ok := s.usage(); ok != (gjson.Get(body, "usage").IsObject() || gjson.Get(body, "response.usage").IsObject()) && len(body) < maxUsageBytes && bytes.HasPrefix(bytes.TrimSpace([]byte(body)), []byte("{")) {
			t.Fatalf("%q streamed: ok %v", body, ok)
		}
	})
}

// BenchmarkUsageTap: the cost of reading a large embeddings answer's usage
// while it is copied (32 KiB reads, as copyBody makes them).
func BenchmarkUsageTap(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"object":"list","data":[`)
	for i := range 64 {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"object":"embedding","index":0,"embedding":[`)
		for j := range 1536 {
			if j > 0 {
				body.WriteByte(',')
			}
			body.WriteString("-0.0123456")
		}
		body.WriteString(`]}`)
	}
	body.WriteString(`],"model":"e","usage":{"prompt_tokens":8,"total_tokens":8}}`)
	b.SetBytes(int64(body.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := tapAll("application/json", body.String(), 32<<10).usage(); !ok {
			b.Fatal("no usage")
		}
	}
}
