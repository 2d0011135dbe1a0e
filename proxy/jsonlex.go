package proxy

import "bytes"

// jsonLexer follows a JSON text as its pieces pass and reports its
// structure to a scan that reads a few members (usageTap, idScan,
// itemScan), keeping only the first bytes of the strings the scan asks
// for. It does not check the text: a scan reads an invalid one as far as
// it can. Bytes that change nothing pass in tight loops: a string's, and
// below the depth a scan reads all but strings and brackets.
type jsonLexer struct {
	p               []byte // the piece being read: a scan sets it, and i to 0
	i               int    // the next byte of p
	c               byte   // the bracket of the last lexOpen or lexClose
	depth           int    // the brackets open
	deep            int    // if above 0, the deepest level a scan reads: deeper, only strings and brackets count
	inString        bool
	escaped         bool   // the string's next byte is escaped
	keyRead         bool   // a key was read (readString) and its colon is still to come
	first, firstEnd int    // a string's first bytes (lexString): p[first:firstEnd]
	read            int    // what the string being read is: lexMember (a key), lexValue, or 0 if it is not read
	buf             []byte // its first max bytes
	max             int
	long            bool // it has more than max bytes
	esc             bool // it has an escape: its bytes are not what it spells
}

// The events of a jsonLexer.
const (
	lexEnd    = iota // the piece is read
	lexOpen          // '{' or '[' (c); depth counts it
	lexClose         // '}' or ']' (c); depth no longer counts it
	lexMember        // the ':' after a key read: buf and its flags hold the key
	lexComma         // ','
	lexString        // a string starts: readString reads it, else it is passed over
	lexValue         // the string read with readString(lexValue, …) ended
	lexOther         // a run of other bytes (a number, a literal), or a colon not a member's
)

// readString reads the string that just started (lexString) as a key
// (lexMember: its colon comes as that event) or a value (lexValue),
// keeping its first max bytes in buf. It reports whether the value is
// already read (it ended in the piece, without an escape); if not, its end
// comes as lexValue.
func (l *jsonLexer) readString(what, max int) bool {
	l.buf, l.max, l.long, l.esc = l.buf[:0], max, false, false
	l.keep(l.p[l.first:l.firstEnd])
	if l.inString {
		l.read = what
		return false
	}
	l.keyRead = l.keyRead || what == lexMember
	return what == lexValue
}

// keep adds b to buf, up to max bytes.
func (l *jsonLexer) keep(b []byte) {
	if room := l.max - len(l.buf); len(b) > room {
		b, l.long = b[:room], true
	}
	l.buf = append(l.buf, b...)
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
			end := i
			for end < len(p) && stringSkip[p[end]] {
				end++
			}
			if l.read != 0 {
				l.keep(p[i:end])
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
			for i < len(p) && deepSkip[p[i]] {
				i++
			}
			if i == len(p) {
				break
			}
		}
		c := p[i]
		i++
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			// Its bytes up to its end or an escape pass now, for readString.
			l.first, ev = i, lexString
			for i < len(p) && stringSkip[p[i]] {
				i++
			}
			l.firstEnd = i
			if l.inString = i == len(p) || p[i] == '\\'; !l.inString {
				i++
			}
		case '{', '[':
			l.depth, l.c, ev = l.depth+1, c, lexOpen
		case '}', ']':
			l.depth, l.c, ev = l.depth-1, c, lexClose
		case ':':
			// Outside the text's brackets a colon is no member's.
			ev = lexOther
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

// stringSkip marks the bytes passed over in a string, deepSkip those below
// the depth a scan reads, plainByte those of a run of other bytes.
var stringSkip, deepSkip, plainByte = func() (str, deep, plain [256]bool) {
	for c := range 256 {
		str[c] = c != '"' && c != '\\'
		plain[c] = bytes.IndexByte([]byte(`"{}[]:,`), byte(c)) < 0
		deep[c] = c != '"' && c != '{' && c != '}' && c != '[' && c != ']'
	}
	return str, deep, plain
}()
