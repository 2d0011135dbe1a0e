package toolselect

import (
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/wire"
)

// Bounds of what the selector is shown: a tool's description and the latest
// user turn are cut (the cache key still covers all of them).
const (
	maxDescription = 300
	maxTurnText    = 16 << 10
)

// offer is what a request body offers and pins, read once per selection.
// Its strings are copies (gjson.GetManyBytes): it never points into the body.
type offer struct {
	client []clientTool
	pinned map[string]bool // called by the history, named by tool_choice, or the client's under "required": never dropped
	text   string          // the latest user turn's text
	none   bool            // tool_choice "none": the model calls no tool anyway
}

// clientTool is one entry of the body's tools array.
type clientTool struct {
	name, description string // name "" = no name: always kept
	raw               string
}

// toolName returns the name of a tools entry or of a call: a function's or
// a custom tool's.
func toolName(v gjson.Result) string {
	if n := v.Get("function.name"); n.Type == gjson.String {
		return n.Str
	}
	return v.Get("custom.name").Str
}

// parseOffer reads the client's tools, the names the history calls and
// tool_choice names, and the latest user turn from body (validated JSON).
func parseOffer(body []byte) *offer {
	res := gjson.GetManyBytes(body, "tools", "messages", "tool_choice")
	o := &offer{pinned: map[string]bool{}}
	res[0].ForEach(func(_, t gjson.Result) bool {
		o.client = append(o.client, clientTool{
			name:        toolName(t),
			description: t.Get("function.description").Str + t.Get("custom.description").Str,
			raw:         t.Raw,
		})
		return true
	})
	res[1].ForEach(func(_, m gjson.Result) bool {
		switch m.Get("role").Str {
		case "user":
			o.text = wire.ContentText(m.Get("content"))
		case "assistant":
			if calls := m.Get("tool_calls"); calls.IsArray() { // null: no call (ForEach would visit the null)
				calls.ForEach(func(_, c gjson.Result) bool {
					if n := toolName(c); n != "" {
						o.pinned[n] = true
					}
					return true
				})
			}
			if n := m.Get("function_call.name").Str; n != "" {
				o.pinned[n] = true
			}
		}
		return true
	})
	tc := res[2]
	switch {
	case tc.Type == gjson.String:
		o.none = tc.Str == "none"
		if tc.Str == "required" {
			// The client expects a call of one of its own tools: with none
			// of them left, the loop would answer with a server tool's
			// result as text, which such a client refuses.
			for _, t := range o.client {
				if t.name != "" {
					o.pinned[t.name] = true
				}
			}
		}
	case tc.IsObject():
		if n := toolName(tc); n != "" {
			o.pinned[n] = true
		}
		tc.Get("allowed_tools.tools").ForEach(func(_, t gjson.Result) bool {
			if n := toolName(t); n != "" {
				o.pinned[n] = true
			}
			return true
		})
	}
	return o
}

// clip returns s cut to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// withClientTools returns a new body with only the client tools keep holds
// (and the unnamed ones), and its tools array. With none kept the tools key
// is removed (an empty array is refused upstream) and the array is nil.
func withClientTools(body []byte, o *offer, keep map[string]bool) ([]byte, []byte, error) {
	n := 0
	for _, t := range o.client {
		if t.name == "" || keep[t.name] {
			n++
		}
	}
	if n == 0 {
		b, err := sjson.DeleteBytes(body, "tools")
		return b, nil, err
	}
	arr := make([]byte, 0, len(body)/2)
	arr = append(arr, '[')
	for _, t := range o.client {
		if t.name != "" && !keep[t.name] {
			continue
		}
		if len(arr) > 1 {
			arr = append(arr, ',')
		}
		arr = append(arr, t.raw...)
	}
	arr = append(arr, ']')
	b, err := sjson.SetRawBytes(body, "tools", arr)
	return b, arr, err
}
