package wire

import "github.com/tidwall/gjson"

// ChatUsage is the token counts of a chat completion's usage object.
type ChatUsage struct {
	Prompt, Completion int64
	Cached             int64 // prompt_tokens_details.cached_tokens: prompt-cache reads
	CacheWrite         int64 // prompt_tokens_details.cache_write_tokens: prompt-cache writes
}

// ParseChatUsage reads a usage object in one pass over its keys (and its
// prompt_tokens_details'), reading what gjson's Get of each path would: the
// first of repeated keys. ok is false when u is not an object.
func ParseChatUsage(u gjson.Result) (c ChatUsage, ok bool) {
	if !u.IsObject() {
		return c, false
	}
	var seen [3]bool
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "prompt_tokens":
			if !seen[0] {
				c.Prompt, seen[0] = v.Int(), true
			}
		case "completion_tokens":
			if !seen[1] {
				c.Completion, seen[1] = v.Int(), true
			}
		case "prompt_tokens_details":
			if !seen[2] {
				seen[2] = true
				c.Cached, c.CacheWrite = promptDetails(v)
			}
		}
		return true
	})
	return c, true
}

// promptDetails reads the cached and cache_write token counts of a
// prompt_tokens_details object, the first of each.
func promptDetails(d gjson.Result) (cached, write int64) {
	if !d.IsObject() {
		return 0, 0
	}
	var seen [2]bool
	d.ForEach(func(k, v gjson.Result) bool {
		switch {
		case k.Str == "cached_tokens" && !seen[0]:
			cached, seen[0] = v.Int(), true
		case k.Str == "cache_write_tokens" && !seen[1]:
			write, seen[1] = v.Int(), true
		}
		return true
	})
	return cached, write
}
