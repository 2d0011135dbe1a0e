package jsonedit

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// deleteTop deletes the top-level members named name of doc, an object.
func deleteTop(t testing.TB, doc, name string) (string, bool) {
	t.Helper()
	body := []byte(doc)
	edits, ok := DeleteMembers(nil, body, Root(body), name)
	if !ok {
		return doc, false
	}
	out, ok := Apply(body, edits)
	return string(out), ok
}

func TestDeleteMembers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`{"a":1,"x":2,"b":3}`, `{"a":1,"b":3}`},
		{`{"x":2,"a":1}`, `{"a":1}`},
		{`{"a":1,"x":2}`, `{"a":1}`},
		{`{"x":2}`, `{}`},
		{`{ "x" : {"y":[1,2]} , "x":"dup", "a" : 1 , "x":3 }`, `{ "a" : 1 }`},
		{`{"a":1,"x":2,"x":3,"b":4,"x":5}`, `{"a":1,"b":4}`},
		{`{"\u0078":1,"a":"x"}`, `{"a":"x"}`}, // an escaped key is the same key
		{`{"a":{"x":1}}`, `{"a":{"x":1}}`},    // only the object's own members
		{`{"a":1}`, `{"a":1}`},
		{`{}`, `{}`},
		{`  {"x":1,"a":2}  `, `  {"a":2}  `},
	} {
		got, ok := deleteTop(t, tc.in, "x")
		if !ok || got != tc.want {
			t.Errorf("%s: got %s (ok %v), want %s", tc.in, got, ok, tc.want)
		}
	}
}

func TestApplyRefusesOverlaps(t *testing.T) {
	t.Parallel()
	body := []byte("0123456789")
	if out, ok := Apply(body, []Edit{{Start: 6, End: 8, Text: []byte("x")}, {Start: 1, End: 3}}); !ok || string(out) != "0345x89" {
		t.Fatalf("sorted edits: %q %v", out, ok)
	}
	for _, edits := range [][]Edit{
		{{Start: 1, End: 5}, {Start: 4, End: 6}},
		{{Start: 8, End: 11}},
		{{Start: 3, End: 2}},
	} {
		if out, ok := Apply(body, edits); ok || string(out) != string(body) {
			t.Errorf("%v: got %q, %v; want body back, false", edits, out, ok)
		}
	}
}

// TestManyMembersIsLinear: deleting thousands of members costs one copy,
// not one per member (sjson's way took seconds for this body).
func TestManyMembersIsLinear(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"a":0`)
	for range 50000 {
		b.WriteString(`,"x":{"type":"ephemeral"},"k":"v"`)
	}
	b.WriteString(`}`)
	body := []byte(b.String())
	root := gjson.ParseBytes(body)
	edits, ok := DeleteMembers(nil, body, root, "x")
	if !ok || len(edits) != 50000 {
		t.Fatalf("%d edits, ok %v", len(edits), ok)
	}
	if n := testing.AllocsPerRun(2, func() { _, _ = Apply(body, edits) }); n > 1 {
		t.Fatalf("Apply made %v allocations, want one", n)
	}
	out, _ := Apply(body, edits)
	if !json.Valid(out) || strings.Contains(string(out), `"x"`) {
		t.Fatalf("output %.80s...", out)
	}
}

func TestReplaceValue(t *testing.T) {
	t.Parallel()
	body := []byte(`{"m":[{"t":"secret"},{"t":"ok"}]}`)
	var edits []Edit
	var ok bool
	gjson.GetBytes(body, "m").ForEach(func(_, p gjson.Result) bool {
		if v := p.Get("t"); v.Str == "secret" {
			edits, ok = ReplaceValue(edits, body, v, []byte(`"[x]"`))
		}
		return true
	})
	out, applied := Apply(body, edits)
	if !ok || !applied || string(out) != `{"m":[{"t":"[x]"},{"t":"ok"}]}` {
		t.Fatalf("got %s (%v %v)", out, ok, applied)
	}
	if _, ok := ReplaceValue(nil, body, gjson.Result{Raw: `"zz"`, Index: 3}, nil); ok {
		t.Fatal("a value not at its index was accepted")
	}
}

// FuzzDeleteMembers: whatever the object, deleting its members named x
// leaves valid JSON with the other members, in order, and no x.
func FuzzDeleteMembers(f *testing.F) {
	f.Add(`{"a":1,"x":2,"b":3}`)
	f.Add(`{"x":{"x":1},"\u0078":[],"a":"x"}`)
	f.Add(` { "x" : 1 } `)
	f.Add(`{"a":1,"x":2,,}`)
	f.Fuzz(func(t *testing.T, doc string) {
		if !json.Valid([]byte(doc)) || !gjson.Parse(doc).IsObject() {
			return
		}
		got, ok := deleteTop(t, doc, "x")
		if !ok {
			t.Fatalf("%s: positions unknown", doc)
		}
		if !json.Valid([]byte(got)) {
			t.Fatalf("%s -> %s: not JSON", doc, got)
		}
		var want, have []string
		gjson.Parse(doc).ForEach(func(k, v gjson.Result) bool {
			if k.Str != "x" {
				want = append(want, k.Str+"="+v.Raw)
			}
			return true
		})
		gjson.Parse(got).ForEach(func(k, v gjson.Result) bool {
			have = append(have, k.Str+"="+v.Raw)
			return true
		})
		if strings.Join(want, "\x00") != strings.Join(have, "\x00") {
			t.Fatalf("%s -> %s: members %q, want %q", doc, got, have, want)
		}
	})
}
