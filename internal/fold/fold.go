// Package fold maps strings to one spelling per class of strings.EqualFold,
// for the checks that refuse keys a lenient reader would take for one
// another (encoding/json matches object keys without regard to case).
package fold

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Key maps k to one spelling per class of strings.EqualFold, so that a map
// keyed by it and the comparison agree: each rune becomes the least rune of
// its simple case folding orbit ("ſ" and "S" become "S", the Kelvin sign
// "K"). ASCII without letters is returned as it is.
func Key(k string) string {
	if Plain(k) && strings.IndexFunc(k, func(r rune) bool { return 'a' <= r && r <= 'z' }) < 0 {
		return k
	}
	var b strings.Builder
	b.Grow(len(k))
	for _, r := range k {
		least := r
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			least = min(least, f)
		}
		b.WriteRune(least)
	}
	return b.String()
}

// Plain reports whether s is ASCII without capital letters: no other such
// string folds to what it folds to.
func Plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}
