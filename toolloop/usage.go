package toolloop

import (
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// usage sums CompletionUsage over the rounds of one client request.
type usage struct {
	seen                          bool
	prompt, completion, total     int64
	cached, cacheWrite, reasoning int64
	hasCacheWrite                 bool
}

// add adds a usage object (gjson of chunk.usage or body.usage); null is
// ignored. It returns the object's prompt_tokens.
func (u *usage) add(r gjson.Result) (prompt int64) {
	c, ok := wire.ParseChatUsage(r)
	if !ok {
		return 0
	}
	u.seen = true
	u.prompt += c.Prompt
	u.completion += c.Completion
	u.total += c.Total
	u.cached += c.Cached
	u.reasoning += c.Reasoning
	if c.HasCacheWrite {
		u.cacheWrite += c.CacheWrite
		u.hasCacheWrite = true
	}
	return c.Prompt
}

// appendJSON appends the summed usage object.
func (u *usage) appendJSON(b []byte) []byte {
	total := u.total
	if total == 0 {
		total = u.prompt + u.completion
	}
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, u.prompt, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, u.completion, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, total, 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, u.cached, 10)
	if u.hasCacheWrite {
		b = append(b, `,"cache_write_tokens":`...)
		b = strconv.AppendInt(b, u.cacheWrite, 10)
	}
	b = append(b, `},"completion_tokens_details":{"reasoning_tokens":`...)
	b = strconv.AppendInt(b, u.reasoning, 10)
	return append(b, "}}"...)
}
