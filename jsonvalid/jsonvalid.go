// Package jsonvalid checks that bytes hold one JSON value, as gjson's
// validator does, with its nesting bounded.
//
// gjson validates by recursion, one level of Go stack per level of nesting
// and no bound: 8 MiB of '[' (a request body the default limit lets in)
// needs more than Go's 1 GB stack, and the process dies of a stack
// overflow, which no recover catches. Every validity check of bytes that
// come from outside the process (a client's body, an upstream's answer or
// event, a model's tool arguments, a tool's result, stored state) goes
// through this package instead (TestNoDirectValidation), so that one rule
// bounds them all.
package jsonvalid

import (
	"bytes"
	"unsafe"

	"github.com/tidwall/gjson"
)

// MaxDepth is the deepest nesting of arrays and objects accepted. Real
// requests, answers and tool schemas nest a few dozen levels at most; at
// this depth gjson's check uses about 100 KiB of stack.
const MaxDepth = 1000

// Bytes reports whether b is one JSON value (surrounding whitespace
// allowed) nested at most MaxDepth deep.
func Bytes(b []byte) bool {
	return shallow(b) && gjson.ValidBytes(b)
}

// TooDeep reports whether b nests an array or object deeper than MaxDepth,
// which Bytes refuses whatever else b holds: an error can say so.
func TooDeep(b []byte) bool { return !shallow(b) }

// String is Bytes for a string.
func String(s string) bool {
	return Bytes(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// shallow reports whether no array or object in b opens deeper than
// MaxDepth. b need not be valid: where b stops being JSON, gjson's check
// stops too, and up to there both read strings and brackets alike.
func shallow(b []byte) bool {
	// Each level takes at least one byte, and one bracket: most bodies
	// are decided without a scan of their own.
	if len(b) <= MaxDepth || bytes.Count(b, openArray)+bytes.Count(b, openObject) <= MaxDepth {
		return true
	}
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '[', '{':
			if depth++; depth > MaxDepth {
				return false
			}
		case ']', '}':
			depth--
		case '"':
			// Skip the string: to its closing quote, past escapes.
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
		}
	}
	return true
}

var (
	openArray  = []byte{'['}
	openObject = []byte{'{'}
)
