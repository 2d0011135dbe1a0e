package wire

import (
	"bytes"
	"unsafe"

	"github.com/tidwall/gjson"
)

var (
	usageName = []byte(`usage`) // a key's name; the quotes around it are checked by hand
	letterEsc = []byte(`\u00`)  // then 6 or 7: how a key may spell a lowercase letter
)

// ChunkUsage returns the top-level "usage" value of a chat chunk when it is
// an object (what gjson.GetBytes(chunk, "usage") returns then), else the
// zero Result. The Result is a view of chunk (no copy): it is valid while
// chunk is unchanged; clone its Raw to keep it.
//
// Every stream layer that counts usage calls it on every chunk, and nearly
// every chunk carries "usage":null or none, so it is a byte scan first: it
// asks gjson only where "usage" is followed by what gjson would take for an
// object value. It agrees with gjson on any bytes, valid JSON or not: a
// nested "usage" key (in content, or in a tool call's arguments) only costs
// one gjson read, which finds the top-level one, and a key spelt with
// escapes is read by gjson too.
func ChunkUsage(chunk []byte) gjson.Result {
	if maybeUsageObject(chunk) {
		u := gjson.Get(unsafe.String(unsafe.SliceData(chunk), len(chunk)), "usage")
		if u.IsObject() {
			return u
		}
	}
	return gjson.Result{}
}

// maybeUsageObject reports whether gjson may find an object under the
// top-level key "usage" of chunk; false means it cannot. gjson matches a
// key whose raw bytes are usage, or whose unescaped bytes are (when it has
// a backslash), and takes for its value the first byte after the key that
// may start one.
func maybeUsageObject(chunk []byte) bool {
	// The scan looks for usage, not "usage: Index is fastest when the
	// needle's first byte is rare, and quotes are everywhere in JSON.
	for i := 0; ; {
		j := bytes.Index(chunk[i:], usageName)
		if j < 0 {
			break
		}
		at := i + j
		i = at + len(usageName)
		if at == 0 || chunk[at-1] != '"' || i == len(chunk) {
			continue
		}
		switch c := chunk[i]; {
		case c == '"':
			if valueStart(chunk[i+1:]) == '{' {
				return true
			}
		case c == '\\' || c < ' ':
			// usage\q or usage\x01 then a backslash: gjson's unescape stops
			// there and reads "usage".
			return true
		}
	}
	// A key that spells a letter of usage as \u00XX (u, s, a, g, e are
	// \u0075, \u0073, \u0061, \u0067, \u0065): no encoder writes one, so
	// this scan is the only cost.
	for b := chunk; ; {
		i := bytes.Index(b, letterEsc)
		if i < 0 {
			return false
		}
		b = b[i+len(letterEsc):]
		if len(b) > 0 && (b[0] == '6' || b[0] == '7') {
			return true
		}
	}
}

// valueStart returns the first byte of b that gjson's object parser takes
// as the start of a value (it passes over any other byte, the colon and
// whitespace included), or 0.
func valueStart(b []byte) byte {
	for _, c := range b {
		switch c {
		case '"', '{', '[', 'n', 't', 'f', '+', '-', 'i', 'I', 'N',
			'0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			return c
		}
	}
	return 0
}
