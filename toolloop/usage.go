package toolloop

import (
	"slices"

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

// appendJSON appends the usage object of a loop of rounds rounds: the
// counts the gateway reads (wire.ChatUsage, summed), and, when one round
// reported the only usage, the members of its own the gateway does not
// read (OpenRouter's cost, DeepSeek's cache hit and miss counts), as a
// relayed answer keeps them. The JSON answer and the stream write the same.
func (u *usage) appendJSON(b []byte, rounds int) []byte {
	b = u.sum.AppendJSON(b)
	if u.n != 1 || rounds != 1 {
		return b
	}
	b = b[:len(b)-1] // the closing brace
	var seenArr [8]string
	seen := seenArr[:0]
	gjson.ParseBytes(u.one).ForEach(func(k, v gjson.Result) bool {
		if !ownUsage(k.Str) && !slices.Contains(seen, k.Str) { // the first of a repeated key, as the readers take it
			seen = append(seen, k.Str)
			b = append(b, ',')
			b = append(b, k.Raw...)
			b = append(b, ':')
			b = append(b, v.Raw...)
		}
		return true
	})
	return append(b, '}')
}

// ownUsage reports whether key is a usage member the gateway writes itself
// (ChatUsage.AppendJSON) or reads into one it writes.
func ownUsage(key string) bool {
	switch key {
	case "prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details", "cache_creation_input_tokens":
		return true
	}
	return false
}
