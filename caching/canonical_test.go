package caching

import (
	"encoding/json"
	"reflect"
	"testing"

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
		{name: "invalid utf-8 replaced", in: "\"a\xffb\"", want: "\"a\uFFFDb\""},
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

// FuzzCanonical checks that the canonical form of valid JSON is valid JSON
// that decodes to the same value, and that canonicalising is idempotent; on
// any input it must not panic.
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[1,2.50,{"y":"\u00e9","x":null}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"temperature":0}`,
		`[true,false,null,-1e-7,"\ud83d\ude00"]`,
		`{"a":1,"a":2}`,
		`{"a":`,
		"\"\xff\"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out := appendCanonical(nil, in)
		if !json.Valid(in) || !gjson.ValidBytes(in) {
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
