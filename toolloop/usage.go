package toolloop

import (
	"strconv"

	"github.com/tidwall/gjson"
)

// usage sums CompletionUsage over the rounds of one client request.
type usage struct {
	seen                          bool
	prompt, completion, total     int64
	cached, cacheWrite, reasoning int64
	hasCacheWrite                 bool
}

// add adds a usage object (gjson of chunk.usage or body.usage); null is ignored.
func (u *usage) add(r gjson.Result) {
	if !r.IsObject() {
		return
	}
	u.seen = true
	u.prompt += r.Get("prompt_tokens").Int()
	u.completion += r.Get("completion_tokens").Int()
	u.total += r.Get("total_tokens").Int()
	if v := r.Get("prompt_tokens_details.cached_tokens"); v.Exists() {
		u.cached += v.Int()
	}
	if v := r.Get("prompt_tokens_details.cache_write_tokens"); v.Exists() {
		u.cacheWrite += v.Int()
		u.hasCacheWrite = true
	}
	if v := r.Get("completion_tokens_details.reasoning_tokens"); v.Exists() {
		u.reasoning += v.Int()
	}
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
