package caching

import (
	"github.com/llmgw/gateway/jsonstring"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// canon writes JSON values in a canonical form: objects with their keys
// sorted (by the unescaped key, duplicates kept in input order), no
// whitespace, strings re-escaped one way, numbers normalised (1.0 → 1,
// 1e2 → 100). Two documents that decode to the same value produce the same
// bytes. A canon is used by one goroutine at a time; get one from canonPool.
type canon struct {
	buf   []byte
	pairs []pair // a stack of object members being sorted
	over  bool   // more than maxMembers members: buf is not the canonical form
}

type pair struct {
	key string
	val gjson.Result
}

// maxMembers bounds the members a canon holds at once: every member of the
// objects it is inside of, and of the one it sorts. Past it a canon stops
// (over): a body of millions of one-byte members ("x":{"":0,"":0,...})
// made a 96-byte entry of each, 90 times the body in memory, kept by the
// pool after the request; maxMembers entries take 1.5 MiB. The callers
// then key the raw text instead. A request's stack of open objects and
// their members is a few hundred entries.
const maxMembers = 1 << 14

var canonPool = sync.Pool{New: func() any { return &canon{buf: make([]byte, 0, 4096)} }}

func getCanon() *canon { c := canonPool.Get().(*canon); c.buf, c.over = c.buf[:0], false; return c }

func putCanon(c *canon) {
	if cap(c.buf) > 1<<20 || cap(c.pairs) > 4096 { // do not keep huge buffers alive
		return
	}
	clear(c.pairs[:cap(c.pairs)])
	c.pairs = c.pairs[:0]
	canonPool.Put(c)
}

// appendCanonical appends the canonical form of the JSON text raw to dst,
// or, for a text of more than maxMembers members at once, 0 and raw itself.
// Malformed input produces some output and never panics. value recurses
// once per level of nesting, so raw must have passed jsonvalid (as the
// tool cache checks its arguments) to be bounded.
func appendCanonical(dst []byte, raw []byte) []byte {
	c := getCanon()
	c.buf = dst
	c.value(gjson.ParseBytes(raw))
	out := c.buf
	if c.over {
		out = append(append(out[:len(dst)], 0), raw...)
	}
	c.buf = nil
	putCanon(c)
	return out
}

// push adds one member to c.pairs; false (and c.over) past maxMembers.
func (c *canon) push(key string, val gjson.Result) bool {
	if len(c.pairs) >= maxMembers {
		c.over = true
		return false
	}
	c.pairs = append(c.pairs, pair{key: key, val: val})
	return true
}

func (c *canon) value(v gjson.Result) {
	if c.over {
		return
	}
	switch v.Type {
	case gjson.Null:
		c.buf = append(c.buf, "null"...)
	case gjson.False:
		c.buf = append(c.buf, "false"...)
	case gjson.True:
		c.buf = append(c.buf, "true"...)
	case gjson.Number:
		c.buf = appendNumber(c.buf, v.Raw)
	case gjson.String:
		c.buf = appendString(c.buf, unquote(v))
	case gjson.JSON:
		if v.IsArray() {
			c.buf = append(c.buf, '[')
			first := true
			v.ForEach(func(_, e gjson.Result) bool {
				if !first {
					c.buf = append(c.buf, ',')
				}
				first = false
				c.value(e)
				return true
			})
			c.buf = append(c.buf, ']')
			return
		}
		if v.IsObject() {
			c.object(v)
			return
		}
		c.buf = append(c.buf, "null"...)
	default:
		c.buf = append(c.buf, "null"...)
	}
}

func (c *canon) object(v gjson.Result) {
	start := len(c.pairs)
	v.ForEach(func(k, e gjson.Result) bool {
		return c.push(unquote(k), e)
	})
	c.sortedMembers(start)
}

// sortedMembers writes the members pushed on c.pairs since start as one
// object with sorted keys, then pops them.
func (c *canon) sortedMembers(start int) {
	members := c.pairs[start:]
	slices.SortStableFunc(members, func(a, b pair) int { return strings.Compare(a.key, b.key) })
	c.buf = append(c.buf, '{')
	for i := start; i < len(c.pairs); i++ {
		if i > start {
			c.buf = append(c.buf, ',')
		}
		p := c.pairs[i] // c.pairs may grow (and move) while the value recurses
		c.buf = appendString(c.buf, p.key)
		c.buf = append(c.buf, ':')
		c.value(p.val)
	}
	c.buf = append(c.buf, '}')
	clear(c.pairs[start:])
	c.pairs = c.pairs[:start]
}

// appendNumber normalises a JSON number: integers keep their digits (any
// size), other numbers go through float64 and come out in the shortest form,
// as an integer when they are integral and exact.
func appendNumber(dst []byte, raw string) []byte {
	if raw == "-0" {
		return append(dst, '0')
	}
	if !strings.ContainsAny(raw, ".eE") {
		return append(dst, raw...)
	}
	f, err := strconv.ParseFloat(raw, 64)
	if err != nil {
		return append(dst, raw...)
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.AppendInt(dst, int64(f), 10)
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}

// appendString appends s as a JSON string (jsonstring.Append) when it is
// valid UTF-8. A string that is not (a lone surrogate unquote kept, or
// invalid bytes) comes out as Go quotes it, after a byte no JSON string
// has: each such string keeps a form of its own. Replaced by U+FFFD, as
// encoding/json and jsonstring do, "\ud800", "\udbff" and "\ufffd" were
// one key, and the gateway sends the upstream what the client sent: three
// different prompts, and the answer cached for one was the others'.
func appendString(dst []byte, s string) []byte {
	if utf8.ValidString(s) {
		return jsonstring.Append(dst, s)
	}
	return strconv.AppendQuote(append(dst, 1), s)
}

// unquote returns the value of a gjson string with encoding/json's rules
// for escapes, except one: a lone UTF-16 surrogate becomes its three bytes
// in WTF-8 (not valid UTF-8, so no text has them; appendString) where
// encoding/json makes it U+FFFD, and the escape after it is decoded on its
// own (gjson would swallow it). Strings without escapes are gjson's own.
func unquote(v gjson.Result) string {
	raw := v.Raw
	if v.Type != gjson.String || strings.IndexByte(raw, '\\') < 0 || len(raw) < 2 {
		return v.Str
	}
	raw = raw[1 : len(raw)-1]
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		b := raw[i]
		if b != '\\' || i+1 >= len(raw) {
			out = append(out, b)
			i++
			continue
		}
		i++
		switch e := raw[i]; e {
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := hex4(raw[i+1:])
			if !ok {
				out = append(out, '\\', 'u')
				break
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if len(raw) >= i+7 && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if r2, ok := hex4(raw[i+3:]); ok {
						if pr := utf16.DecodeRune(r, r2); pr != utf8.RuneError {
							out = utf8.AppendRune(out, pr)
							i += 6
							break
						}
					}
				}
				out = append(out, 0xe0|byte(r>>12), 0x80|byte(r>>6)&0x3f, 0x80|byte(r)&0x3f)
				break
			}
			out = utf8.AppendRune(out, r)
		default: // '"', '\\', '/' and anything gjson let through
			out = append(out, e)
		}
		i++
	}
	return string(out)
}

// hex4 reads the four hex digits at the start of s.
func hex4(s string) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	return jsonstring.Hex4(s[:4])
}

const hexDigits = "0123456789abcdef"
