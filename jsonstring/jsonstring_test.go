package jsonstring

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

func TestAppend(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"", `""`},
		{"plain", `"plain"`},
		{`q"b\s`, `"q\"b\\s"`},
		{"a\nb\rc\td\x01", `"a\nb\rc\td\u0001"`},
		{"é 🎉", `"é 🎉"`},
		{"bad\xffbyte", "\"bad\uFFFDbyte\""},
	}
	for _, c := range cases {
		if got := string(Append(nil, c.in)); got != c.want {
			t.Errorf("Append(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

// FuzzAppend: the output is valid JSON that decodes to s (with invalid
// UTF-8 replaced, as encoding/json does).
func FuzzAppend(f *testing.F) {
	for _, s := range []string{"", "x", "\"\\\n", "é", "\xff\xfe", "\u2028"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Append([]byte("prefix"), s)
		var got string
		if err := json.Unmarshal(out[len("prefix"):], &got); err != nil {
			t.Fatalf("%q → %s: %v", s, out, err)
		}
		want := s
		if !utf8.ValidString(s) {
			b, _ := json.Marshal(s)
			_ = json.Unmarshal(b, &want)
		}
		if got != want {
			t.Fatalf("%q round-trips to %q", s, got)
		}
	})
}
