// Package jsonstring writes JSON string literals without reflection: the
// hot paths (chunks the tool loop builds, the mock's answers, cache keys)
// append them to byte slices they own.
package jsonstring

import "unicode/utf8"

const hexDigits = "0123456789abcdef"

// Append appends s to dst as a JSON string literal and returns the extended
// slice. Quotes, backslashes and control characters are escaped; invalid
// UTF-8 becomes U+FFFD, as encoding/json does; other runes are written as
// they are, so the result is valid JSON and its own canonical form.
func Append(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '"', '\\':
				dst = append(dst, '\\', b)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// Hex4 reads the four hex digits of a \u escape.
func Hex4[T string | []byte](b T) (rune, bool) {
	if len(b) != 4 {
		return 0, false
	}
	var r rune
	for i := range len(b) {
		c := b[i]
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// Unescaped reports whether the byte at data[i] is not itself escaped (a
// backslash there starts an escape, a quote there ends its string): an
// even number of backslashes comes before it.
func Unescaped[T string | []byte](data T, i int) bool {
	n := 0
	for k := i - 1; k >= 0 && data[k] == '\\'; k-- {
		n++
	}
	return n%2 == 0
}
