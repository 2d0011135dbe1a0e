package contextedit

import (
	"unicode"
	"unicode/utf8"
)

// chunkMax bounds the text handed to the tokenizer at once. tiktoken-go's
// byte-pair merge is quadratic in the length of one pre-tokenized piece, and a
// single piece can be as long as the input ("AAAA…", a run of newlines): 20k
// such bytes take about half a second, 1 MB would take minutes. Long strings
// are therefore counted chunk by chunk, cut where the pre-tokenizer (the
// cl100k/o200k patterns) always ends a piece, so the sum is exact:
//
//   - before a space that follows a non-space and precedes a letter (" word"
//     starts a piece; no piece holds a non-space followed by a space);
//   - before an ASCII punctuation mark other than the apostrophe that follows
//     a letter or digit (letter pieces extend over punctuation only through
//     contractions such as 's; digit pieces never).
//
// Only a window of chunkMax bytes without any such point (a long run of one
// character class) is cut, at a rune boundary near runCut bytes (short, since
// the run is one quadratic piece), which may shift the count by a token per
// cut.
const (
	chunkMax = 1024
	runCut   = 256
)

// encodeLen returns the token count of s, tokenizing it in chunks.
func (c *Counter) encodeLen(s string) int {
	n := 0
	for len(s) > chunkMax {
		cut := splitPoint(s)
		n += len(c.enc.EncodeOrdinary(s[:cut]))
		s = s[cut:]
	}
	return n + len(c.enc.EncodeOrdinary(s))
}

// splitPoint returns where to cut s (len(s) > chunkMax): the last exact piece
// boundary in (0, chunkMax], else the last rune boundary at or before runCut.
func splitPoint(s string) int {
	for i := chunkMax; i > 0; i-- {
		b := s[i]
		if b >= utf8.RuneSelf || !utf8.RuneStart(b) {
			continue
		}
		prev, _ := utf8.DecodeLastRuneInString(s[:i])
		switch {
		case b == ' ':
			if next, _ := utf8.DecodeRuneInString(s[i+1:]); unicode.IsLetter(next) && !unicode.IsSpace(prev) {
				return i
			}
		case b != '\'' && isASCIIPunct(b):
			if unicode.IsLetter(prev) || unicode.IsNumber(prev) {
				return i
			}
		}
	}
	i := runCut
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	if i == 0 {
		return runCut // not UTF-8 at all; any cut will do
	}
	return i
}

func isASCIIPunct(b byte) bool {
	return b > ' ' && b < 0x7f && !(b >= '0' && b <= '9') && !(b|0x20 >= 'a' && b|0x20 <= 'z')
}
