package toolselect

import (
	"bytes"
	"sync/atomic"
)

// Every entry of a tools array has one "function" or "custom" key: the
// keys are counted, the array is not parsed. A key inside a parameter
// schema overcounts (Select counts exactly); a key written with a space
// before its colon, or escaped, undercounts and leaves the request
// unselected, as it would be without tool selection.
var (
	functionKey = []byte(`function":`)
	customKey   = []byte(`custom":`)
)

// maxCounted bounds the tools arrays counts remembers (64 of them at most).
const maxCounted = 64 << 10

// counts remembers how many tools recent tools arrays hold. A client sends
// the same array with every request of a conversation, and comparing it
// with the remembered copy costs a fraction of counting it again. Safe for
// concurrent use; the zero value is empty.
type counts struct {
	slots [64]atomic.Pointer[counted]
}

type counted struct {
	tools []byte // a copy, never modified
	n     int
}

// count returns the number of tools in the array tools (the function and
// custom keys), without allocating when the array was seen last in its slot.
func (c *counts) count(tools []byte) int {
	if len(tools) == 0 {
		return 0
	}
	slot := &c.slots[slotOf(tools)]
	if e := slot.Load(); e != nil && bytes.Equal(e.tools, tools) {
		return e.n
	}
	n := bytes.Count(tools, functionKey) + bytes.Count(tools, customKey)
	if len(tools) <= maxCounted {
		slot.Store(&counted{tools: bytes.Clone(tools), n: n})
	}
	return n
}

// slotOf spreads arrays over the slots by their length and a few bytes.
func slotOf(b []byte) int {
	h := uint(len(b))
	for _, i := range [...]int{len(b) / 4, len(b) / 2, 3 * len(b) / 4, len(b) - 2} {
		if i >= 0 {
			h = h*31 + uint(b[i])
		}
	}
	return int(h % 64)
}
