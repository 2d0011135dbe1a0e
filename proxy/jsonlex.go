package proxy

import (
	"bytes"
	"encoding/binary"
)

// jsonLexer follows the bytes of a JSON text as they pass, piece by piece,
// and reports its structure to a scan that reads a few members of it
// (usageTap, idScan, itemScan). It keeps nothing of the text but the first
// bytes of a string the scan asks for (a key, an id), whatever the
// answer's size, and does not check the text: a scan reads an invalid one
// as far as it can, and its caller judges what it found. The bytes that
// change nothing are passed over in tight loops: a string's up to its
// quote or next escape, and below the depth a scan reads (deep) all but
// strings and brackets (an embeddings answer's numbers).
type jsonLexer struct {
	p     []byte // the piece being read
	i     int    // the next byte of p
	quote int    // the index in p of the next quote at or after i, if not below i
	c     byte   // the bracket of the last lexOpen or lexClose
	depth int    // the brackets open
	// deep, if above 0, is the deepest level whose colons, commas and
	// other bytes a scan reads: deeper, only strings and brackets count.
	deep     int
	inString bool
	escaped  bool // the string's next byte is escaped
	keyRead  bool // a key was read (readString) and its colon is still to come

	read int    // what the string being read is: lexMember (a key), lexValue, or 0 if it is not read
	buf  []byte // its first max bytes
	max  int
	long bool // it has more than max bytes
	esc  bool // it has an escape: its bytes are not what it spells
}

// The events of a jsonLexer.
const (
	lexEnd    = iota // the piece is read
	lexOpen          // '{' or '[' (c); depth counts it
	lexClose         // '}' or ']' (c); depth no longer counts it
	lexColon         // ':' other than a member's
	lexMember        // the ':' after a key read: buf and its flags hold the key
	lexComma         // ','
	lexString        // a string starts: readString reads it, else it is passed over
	lexValue         // the string read with readString(lexValue, …) ended
	lexOther         // a run of other bytes: a number, a literal, stray bytes
)

// feed starts the reading of the next piece of the text.
func (l *jsonLexer) feed(p []byte) {
	l.p, l.i, l.quote = p, 0, -1
}

// readString reads the string that just started (lexString) as a key
// (lexMember: its colon comes as that event) or a value (lexValue: its end
// does), keeping its first max bytes in buf.
func (l *jsonLexer) readString(what, max int) {
	l.read, l.buf, l.max, l.long, l.esc = what, l.buf[:0], max, false, false
}

// next reads up to the next event and returns it.
func (l *jsonLexer) next() int {
	p, i, ev := l.p, l.i, lexEnd
	for i < len(p) {
		if l.inString {
			if l.escaped {
				l.escaped = false
				i++
				continue
			}
			// The string's bytes up to its quote or next escape: the quote
			// is searched for once, the escapes before it one by one.
			if l.quote < i {
				l.quote = len(p)
				if j := bytes.IndexByte(p[i:], '"'); j >= 0 {
					l.quote = i + j
				}
			}
			end := l.quote
			if j := bytes.IndexByte(p[i:end], '\\'); j >= 0 {
				end = i + j
			}
			if l.read != 0 {
				if room := l.max - len(l.buf); end-i > room {
					l.buf, l.long = append(l.buf, p[i:i+room]...), true
				} else {
					l.buf = append(l.buf, p[i:end]...)
				}
			}
			if i = end; i == len(p) {
				break
			}
			i++
			if p[end] == '\\' {
				l.escaped, l.esc = true, l.esc || l.read != 0
				continue
			}
			read := l.read
			l.inString, l.read = false, 0
			l.keyRead = l.keyRead || read == lexMember
			if read == lexValue {
				ev = lexValue
				break
			}
			continue
		}
		if l.deep > 0 && l.depth > l.deep {
			if i = skipDeep(p, i); i == len(p) {
				break
			}
		}
		c := p[i]
		i++
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			l.inString, ev = true, lexString
		case '{', '[':
			l.depth, l.c, ev = l.depth+1, c, lexOpen
		case '}', ']':
			l.depth, l.c, ev = l.depth-1, c, lexClose
		case ':':
			// Outside the text's brackets a colon is no member's.
			ev = lexColon
			if l.keyRead && l.depth > 0 {
				l.keyRead, ev = false, lexMember
			}
		case ',':
			ev = lexComma
		default:
			for i < len(p) && plainByte[p[i]] {
				i++
			}
			ev = lexOther
		}
		break
	}
	l.i = i
	return ev
}

// skipDeep returns the index in p of the first quote or bracket from i
// on, or len(p). It tests eight bytes at a time (a byte b is a bracket
// when b|0x20 is '{' or '}'), then the word that has one byte by byte.
func skipDeep(p []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	hasZero := func(w uint64) uint64 { return (w - ones) &^ w & highs }
	for ; i+8 <= len(p); i += 8 {
		w := binary.LittleEndian.Uint64(p[i:])
		b := w | 0x20*ones
		if hasZero(w^'"'*ones)|hasZero(b^'{'*ones)|hasZero(b^'}'*ones) != 0 {
			break
		}
	}
	for i < len(p) && deepSkip[p[i]] {
		i++
	}
	return i
}

// deepSkip marks the bytes passed over below the depth a scan reads, and
// plainByte those of a run of other bytes (lexOther).
var deepSkip, plainByte = func() (deep, plain [256]bool) {
	for c := range 256 {
		plain[c] = bytes.IndexByte([]byte(`"{}[]:,`), byte(c)) < 0
		deep[c] = c != '"' && c != '{' && c != '}' && c != '[' && c != ']'
	}
	return deep, plain
}()
