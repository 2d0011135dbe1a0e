package toolloop

import (
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// usage sums the usage of the rounds of one client request.
type usage struct {
	seen bool
	sum  wire.ChatUsage
}

// add adds a usage object (gjson of chunk.usage or body.usage); null is
// ignored. It returns the object's prompt_tokens.
func (u *usage) add(r gjson.Result) (prompt int64) {
	c, ok := wire.ParseChatUsage(r)
	if !ok {
		return 0
	}
	u.seen = true
	u.sum.Add(c)
	return c.Prompt
}

// appendJSON appends the summed usage object.
func (u *usage) appendJSON(b []byte) []byte { return u.sum.AppendJSON(b) }
