package caching

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestStripMarkersCopiesOnce: a body of thousands of marked parts is
// stripped in about one copy of it. Deleting the markers one by one
// copied the body per marker: 8,000 parts of a 400 KB body allocated
// gigabytes and took seconds of CPU per request, on the default
// middleware.
func TestStripMarkersCopiesOnce(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[{"role":"user","content":[`)
	const parts = 8000
	for i := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"type":"text","text":"part","cache_control":{"type":"ephemeral"}}`)
	}
	b.WriteString(`]}],"cache_control":{"type":"ephemeral"}}`)
	body := []byte(b.String())

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out := stripMarkers(body)
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 10*uint64(len(body)) {
		t.Fatalf("stripping %d markers from %d bytes allocated %d bytes: more than ten copies of the body", parts+1, len(body), alloc)
	}
	if !json.Valid(out) || strings.Contains(string(out), "cache_control") {
		t.Fatalf("not stripped: %.200s", out)
	}
	if n := gjson.GetBytes(out, "messages.0.content.#").Int(); n != parts {
		t.Fatalf("%d parts left, want %d", n, parts)
	}
}

// FuzzStripMarkers: whatever the body, stripping leaves valid JSON with no
// marker where the prompt cache looks for one, changes nothing else (a
// body without markers comes back as it was), and a second strip changes
// nothing.
func FuzzStripMarkers(f *testing.F) {
	f.Add(`{"tools":[{"type":"function","function":{"name":"a","cache_control":1},"cache_control":{}}],"messages":[{"role":"user","cache_control":2,"content":[{"text":"x","cache_control":{"type":"ephemeral"}},"s"]}],"cache_control":3}`)
	f.Add(`{"messages":[{"content":[{"cache_control":1,"cache_control":2}]}]}`)
	f.Add(` {"messages":"cache_control","cache_control":null} `)
	f.Add(`{"messages":[{"content":"\"cache_control\""}]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		body := []byte(doc)
		out := stripMarkers(body)
		if !json.Valid(body) {
			return
		}
		if !json.Valid(out) {
			t.Fatalf("%s -> %s: not JSON", doc, out)
		}
		res := gjson.GetManyBytes(out, "tools", "messages", "cache_control")
		if p := markerPaths(res[0], res[1]); len(p) > 0 || (res[2].Exists() && gjson.ParseBytes(out).IsObject()) {
			t.Fatalf("%s -> %s: markers left at %v", doc, out, p)
		}
		in := gjson.GetManyBytes(body, "tools", "messages", "cache_control")
		if len(markerPaths(in[0], in[1])) == 0 && !(in[2].Exists() && gjson.ParseBytes(body).IsObject()) && string(out) != doc {
			t.Fatalf("%s -> %s: changed a body without markers", doc, out)
		}
		if again := stripMarkers(out); string(again) != string(out) {
			t.Fatalf("%s -> %s -> %s: a second strip changed it", doc, out, again)
		}
	})
}
