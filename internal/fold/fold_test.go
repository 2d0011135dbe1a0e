package fold

import (
	"strings"
	"testing"
)

// Key agrees with strings.EqualFold: two strings fold to the same key
// exactly when EqualFold says they are equal.
func FuzzKey(f *testing.F) {
	for _, s := range [][2]string{{"q", "Q"}, {"k", "\u212a"}, {"ſ", "S"}, {"id", "ID"}, {"a1", "A1"}, {"x", "y"}, {"", ""}, {"\xff", "\xfe"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if (Key(a) == Key(b)) != strings.EqualFold(a, b) {
			t.Fatalf("%q %q: keys %q %q, EqualFold %v", a, b, Key(a), Key(b), strings.EqualFold(a, b))
		}
	})
}
