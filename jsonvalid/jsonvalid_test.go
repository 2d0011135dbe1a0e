package jsonvalid

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// nested is n arrays, one inside the other, around inner.
func nested(n int, inner string) []byte {
	return []byte(strings.Repeat("[", n) + inner + strings.Repeat("]", n))
}

func TestDepthBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"at the bound", nested(MaxDepth, "1"), true},
		{"one past the bound", nested(MaxDepth+1, "1"), false},
		{"objects past the bound", []byte(strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1)), false},
		{"mixed at the bound", []byte(strings.Repeat(`[{"a":`, MaxDepth/2) + "1" + strings.Repeat("}]", MaxDepth/2)), true},
		{"brackets in strings do not nest", []byte(`["` + strings.Repeat("[{", 3*MaxDepth) + `"]`), true},
		{"escaped quote keeps the string open", []byte(`["\"` + strings.Repeat("[", 3*MaxDepth) + `"]`), true},
		{"many siblings are shallow", []byte("[" + strings.TrimSuffix(strings.Repeat("[],", 5*MaxDepth), ",") + "]"), true},
		{"8 MiB of [ (the crash)", bytes.Repeat([]byte("["), 8<<20), false},
		{"8 MiB of { (the crash)", bytes.Repeat([]byte(`{"":`), 2<<20), false},
		{"not JSON", []byte(`{"a":`), false},
		{"plain object", []byte(` {"model":"m","messages":[{"role":"user","content":"hi"}]} `), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Bytes(tc.b); got != tc.want {
				t.Fatalf("Bytes = %v, want %v", got, tc.want)
			}
			if got := String(string(tc.b)); got != tc.want {
				t.Fatalf("String = %v, want %v", got, tc.want)
			}
		})
	}
}

// depth is the deepest nesting of the valid JSON prefix of b, read the
// slow way (gjson's own reading of its first value), for the fuzz test.
func depth(v gjson.Result) int {
	d := 0
	if v.IsArray() || v.IsObject() {
		v.ForEach(func(_, e gjson.Result) bool {
			d = max(d, depth(e))
			return true
		})
		return d + 1
	}
	return 0
}

// Bytes agrees with gjson's validator on every input nested within the
// bound, and refuses every valid one nested deeper.
func FuzzBytes(f *testing.F) {
	for _, s := range []string{`{}`, `[1,[2,[3]]]`, `{"a":"[[[\"]]"}`, `"\\"`, `[`, `]]][[[`, `{"a":[{"b":null}]}`, " \t\n", `tru`} {
		f.Add([]byte(s), uint16(0))
	}
	f.Fuzz(func(t *testing.T, b []byte, wrap uint16) {
		// Wrap b in enough arrays to cross the bound now and then.
		b = nested(int(wrap)%(2*MaxDepth), string(b))
		got := Bytes(b)
		valid := gjson.ValidBytes(b)
		if !valid {
			if got {
				t.Fatalf("Bytes accepted what gjson refuses: %q", b)
			}
			return
		}
		if want := depth(gjson.ParseBytes(b)) <= MaxDepth; got != want {
			t.Fatalf("Bytes = %v, want %v (depth %d): %.200q", got, want, depth(gjson.ParseBytes(b)), b)
		}
	})
}

func BenchmarkBytes(b *testing.B) {
	chunk := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"abcd"},"logprobs":null,"finish_reason":null}]}`)
	body := []byte(`{"model":"m","messages":[` + strings.TrimSuffix(strings.Repeat(`{"role":"user","content":"`+strings.Repeat("word ", 40)+`"},`, 50), ",") + `]}`)
	for _, tc := range []struct {
		name string
		b    []byte
	}{{"chunk", chunk}, {"10KB body", body}} {
		b.Run(tc.name+"/gjson", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				gjson.ValidBytes(tc.b)
			}
		})
		b.Run(tc.name+"/jsonvalid", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Bytes(tc.b)
			}
		})
	}
}
