package caching

import (
	"bytes"
	"encoding/json"
	"reflect"
	"regexp"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

func TestCanonical(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{name: "sorted keys, no whitespace", in: "{ \"b\" : 1,\n \"a\" : [ 1 , 2 ] }", want: `{"a":[1,2],"b":1}`},
		{name: "nested objects sorted", in: `{"z":{"y":1,"x":{"d":0,"c":0}},"a":null}`, want: `{"a":null,"z":{"x":{"c":0,"d":0},"y":1}}`},
		{name: "escapes normalised", in: `"\u0041\/\u00e9\n"`, want: "\"A/\u00e9\\n\""},
		{name: "escaped keys sort by value", in: `{"\u0062":1,"a":2}`, want: `{"a":2,"b":1}`},
		{name: "floats normalised", in: `[1.0, 1e2, -0, 0.5, 1.5e300]`, want: `[1,100,0,0.5,1.5e+300]`},
		{name: "big integers kept", in: `123456789012345678901234567890`, want: `123456789012345678901234567890`},
		{name: "duplicates kept in order", in: `{"a":1,"b":0,"a":2}`, want: `{"a":1,"a":2,"b":0}`},
		{name: "control characters escaped", in: "\"a\\u0001b\\\"\"", want: `"a\u0001b\""`},
		{name: "invalid utf-8 kept apart", in: "\"a\xffb\"", want: "\x01\"a\\xffb\""},
		{name: "lone surrogate kept apart", in: `"a\ud800b"`, want: "\x01\"a\\xed\\xa0\\x80b\""},
		{name: "lone surrogate before an escape", in: `"\uDBFF\u0041"`, want: "\x01\"\\xed\\xaf\\xbfA\""},
		{name: "surrogate pair decoded", in: `"\ud83d\ude00"`, want: "\"\U0001F600\""},
		{name: "replacement character is text", in: `"\ufffd"`, want: "\"\uFFFD\""},
		{name: "lone surrogate in a key", in: `{"\udc00":1,"a":2}`, want: "{\"a\":2,\x01\"\\xed\\xb0\\x80\":1}"},
		{name: "empty containers", in: `{"a":{},"b":[]}`, want: `{"a":{},"b":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := string(appendCanonical(nil, []byte(tt.in))); got != tt.want {
				t.Errorf("canonical(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// surrogateEscape matches a \u escape of a UTF-16 surrogate (and some text
// that only looks like one: enough to tell that an input had none).
var surrogateEscape = regexp.MustCompile(`\\u[dD][89a-fA-F]`)

// FuzzCanonical checks that the canonical form of valid JSON is valid JSON
// that decodes to the same value, and that canonicalising is idempotent,
// unless a string in it is kept apart (appendString), which only a string
// with invalid UTF-8 or a lone surrogate may be; on any input it must not
// panic.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[1,2.50,{"y":"\u00e9","x":null}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"temperature":0}`,
		`[true,false,null,-1e-7,"\ud83d\ude00"]`,
		`{"a":1,"a":2}`,
		`{"a":`,
		"\"\xff\"",
		`{"\ud800":"\udfff\u0041"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := appendCanonical(nil, in)
		if !json.Valid(in) || !gjson.ValidBytes(in) {
			return
		}
		if bytes.IndexByte(out, 1) >= 0 {
			// A string kept apart (appendString): the input must have had
			// invalid UTF-8 or a surrogate's escape; no JSON comparison.
			if utf8.Valid(in) && !surrogateEscape.Match(in) {
				t.Fatalf("canonical(%q) = %q keeps a string apart that has neither", in, out)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("canonical(%q) = %q is not JSON", in, out)
		}
		var a, b any
		errA, errB := json.Unmarshal(in, &a), json.Unmarshal(out, &b)
		if (errA == nil) != (errB == nil) {
			t.Fatalf("decode differs: %v vs %v", errA, errB)
		}
		if errA == nil && !reflect.DeepEqual(a, b) {
			t.Fatalf("canonical(%q) = %q decodes to %v, want %v", in, out, b, a)
		}
		if again := appendCanonical(nil, out); string(again) != string(out) {
			t.Fatalf("not idempotent: %q then %q", out, again)
		}
	})
}
