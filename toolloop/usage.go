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

// add adds a usage object (gjson of chunk.usage or body.usage); null is
// ignored. One pass over the object, reading what gjson's paths would: the
// first key of a name counts, and a detail is read from the first details
// object that has it. It returns the object's prompt_tokens.
func (u *usage) add(r gjson.Result) (prompt int64) {
	if !r.IsObject() {
		return 0
	}
	u.seen = true
	var seen [3]bool
	prev := u.prompt
	var cached, write, reasoning gjson.Result
	r.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "prompt_tokens":
			addFirst(&seen[0], &u.prompt, v)
		case "completion_tokens":
			addFirst(&seen[1], &u.completion, v)
		case "total_tokens":
			addFirst(&seen[2], &u.total, v)
		case "prompt_tokens_details":
			if !cached.Exists() {
				cached = v.Get("cached_tokens")
			}
			if !write.Exists() {
				write = v.Get("cache_write_tokens")
			}
		case "completion_tokens_details":
			if !reasoning.Exists() {
				reasoning = v.Get("reasoning_tokens")
			}
		}
		return true
	})
	u.cached += cached.Int()
	if write.Exists() {
		u.cacheWrite += write.Int()
		u.hasCacheWrite = true
	}
	u.reasoning += reasoning.Int()
	return u.prompt - prev
}

func addFirst(seen *bool, n *int64, v gjson.Result) {
	if !*seen {
		*seen = true
		*n += v.Int()
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
