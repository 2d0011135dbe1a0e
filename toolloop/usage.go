package toolloop

import (
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// usage sums the usage of the rounds of one client request.
type usage struct {
	seen bool
	sum  wire.ChatUsage
	n    int    // usage objects added
	one  []byte // the first one as the upstream wrote it
}

// add adds a usage object (gjson of chunk.usage or body.usage); null, or
// one whose counts are no counts, is ignored. It returns the object's
// prompt_tokens.
func (u *usage) add(r gjson.Result) (prompt int64) {
	c, ok := wire.ParseChatUsage(r)
	if !ok {
		return 0
	}
	u.seen = true
	u.sum.Add(c)
	if u.n++; u.n == 1 {
		u.one = append(u.one[:0], r.Raw...)
	}
	return c.Prompt
}

// appendJSON appends the usage object: the one round's as the upstream
// wrote it (with the members the gateway does not read: OpenRouter's
// cost, DeepSeek's cache counts, as a relayed answer keeps them), or the
// rounds' sum. The JSON answer and the stream write the same.
func (u *usage) appendJSON(b []byte) []byte {
	if u.n == 1 {
		return append(b, u.one...)
	}
	return u.sum.AppendJSON(b)
}
