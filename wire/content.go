package wire

import (
	"strings"

	"github.com/tidwall/gjson"
)

// ContentText is a chat message content's text: the string, or its text parts
// joined by newlines.
func ContentText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var parts []string
	c.ForEach(func(_, p gjson.Result) bool {
		if t := p.Get("text"); t.Type == gjson.String {
			parts = append(parts, t.Str)
		}
		return true
	})
	return strings.Join(parts, "\n")
}
