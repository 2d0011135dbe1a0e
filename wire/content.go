package wire

import (
	"strings"

	"github.com/tidwall/gjson"
)

// ContentText is the text of a message's content: the string itself, or
// the text of its parts joined without a separator ("" for anything else).
func ContentText(c gjson.Result) string {
	if c.Type == gjson.String {
		return c.Str
	}
	var b strings.Builder
	c.ForEach(func(_, part gjson.Result) bool {
		if t := part.Get("text"); t.Type == gjson.String {
			b.WriteString(t.Str)
		}
		return true
	})
	return b.String()
}
