package wire

import (
	"math"
	"strconv"

	"github.com/tidwall/gjson"
)

// MaxTokenCount bounds a token count taken from an upstream's usage: far
// above any real call (about a trillion tokens), low enough that sums of
// many stay far from int64's end.
const MaxTokenCount = 1 << 40

// TokenCount reads one count of an upstream's usage: a JSON integer in
// [0, MaxTokenCount]. ok is false for anything else (a negative count, a
// fraction, a string, 1e400): an upstream's garbage is never shown to a
// client, summed or charged as a count.
func TokenCount(v gjson.Result) (n int64, ok bool) {
	if v.Type != gjson.Number || v.Num < 0 || v.Num > MaxTokenCount || v.Num != math.Trunc(v.Num) {
		return 0, false
	}
	return int64(v.Num), true
}

// detail reads a usage detail: its count, 0 when it is not one.
func detail(v gjson.Result) int64 {
	n, _ := TokenCount(v)
	return n
}

// ChatUsage is the token counts of a chat completion's usage object.
type ChatUsage struct {
	Prompt, Completion, Total int64
	Cached                    int64 // prompt_tokens_details.cached_tokens: prompt-cache reads
	CacheWrite                int64 // prompt_tokens_details.cache_write_tokens, else cache_creation_input_tokens: prompt-cache writes
	HasCacheWrite             bool  // cache_write_tokens is present (a provider that reports writes)
	Reasoning                 int64 // completion_tokens_details.reasoning_tokens
	HasReasoning              bool  // reasoning_tokens is present (written only then, or when not 0)
	// OpenAI's other details (prompt and completion audio_tokens,
	// accepted_ and rejected_prediction_tokens), in that order; Has says
	// which a provider reported: only those are written, so that a sum
	// over a tool loop's rounds shows what a relayed answer shows.
	Extra    [4]int64
	HasExtra [4]bool
}

// extraDetails names ChatUsage.Extra's members: the details object of
// each, and its key.
var extraDetails = [4][2]string{
	{"prompt_tokens_details", "audio_tokens"},
	{"completion_tokens_details", "audio_tokens"},
	{"completion_tokens_details", "accepted_prediction_tokens"},
	{"completion_tokens_details", "rejected_prediction_tokens"},
}

// ParseChatUsage reads a usage object in one pass over its keys, reading
// what gjson's Get of each path would: the first of repeated keys, and a
// detail from the first details object that has it. Cache writes without
// prompt_tokens_details.cache_write_tokens are read from a top-level
// cache_creation_input_tokens (Anthropic's usage, as a translator may keep
// it). ok is false when u is not an object, or when its prompt, completion
// or total count is present (not null) but not a count (TokenCount): such
// a usage is no report at all, as if the upstream had sent none (a
// metered call is then estimated). A detail that is not a count is 0.
func ParseChatUsage(u gjson.Result) (c ChatUsage, ok bool) {
	if !u.IsObject() {
		return c, false
	}
	var seen [3]bool
	bad := false
	var cached, write, topWrite, reasoning gjson.Result
	var extra [4]gjson.Result // in extraDetails' order
	firstOf := func(r *gjson.Result, v gjson.Result) {
		if !r.Exists() {
			*r = v
		}
	}
	u.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "prompt_tokens":
			bad = !first(&seen[0], &c.Prompt, v) || bad
		case "completion_tokens":
			bad = !first(&seen[1], &c.Completion, v) || bad
		case "total_tokens":
			bad = !first(&seen[2], &c.Total, v) || bad
		case "prompt_tokens_details":
			v.ForEach(func(k, v gjson.Result) bool {
				switch k.Str {
				case "cached_tokens":
					firstOf(&cached, v)
				case "cache_write_tokens":
					firstOf(&write, v)
				case "audio_tokens":
					firstOf(&extra[0], v)
				}
				return true
			})
		case "cache_creation_input_tokens": // Anthropic's spelling, kept by a translator
			firstOf(&topWrite, v)
		case "completion_tokens_details":
			v.ForEach(func(k, v gjson.Result) bool {
				switch k.Str {
				case "reasoning_tokens":
					firstOf(&reasoning, v)
				case "audio_tokens":
					firstOf(&extra[1], v)
				case "accepted_prediction_tokens":
					firstOf(&extra[2], v)
				case "rejected_prediction_tokens":
					firstOf(&extra[3], v)
				}
				return true
			})
		}
		return true
	})
	if !write.Exists() {
		write = topWrite
	}
	if bad {
		return ChatUsage{}, false
	}
	c.Cached, c.CacheWrite, c.HasCacheWrite = detail(cached), detail(write), write.Exists()
	c.Reasoning, c.HasReasoning = detail(reasoning), reasoning.Exists()
	if seen[0] {
		// Cached input is part of the prompt: more of it than the prompt
		// (an upstream's error) would show cache-hit ratios over 100% in
		// the usage record, the metrics, the access log and the spans.
		c.Cached = min(c.Cached, c.Prompt)
	}
	for i, v := range extra {
		c.Extra[i], c.HasExtra[i] = detail(v), v.Exists()
	}
	return c, true
}

// Add adds o's counts to c: the usage of several calls, summed. The sum
// has a cache-write count when any of them had one.
func (c *ChatUsage) Add(o ChatUsage) {
	c.Prompt += o.Prompt
	c.Completion += o.Completion
	c.Total += o.Total
	c.Cached += o.Cached
	c.CacheWrite += o.CacheWrite
	c.HasCacheWrite = c.HasCacheWrite || o.HasCacheWrite
	c.Reasoning += o.Reasoning
	c.HasReasoning = c.HasReasoning || o.HasReasoning
	for i := range c.Extra {
		c.Extra[i] += o.Extra[i]
		c.HasExtra[i] = c.HasExtra[i] || o.HasExtra[i]
	}
}

// AppendJSON appends c as a chat usage object: total_tokens is prompt +
// completion when c has no total, and cache_write_tokens and the Extra
// details are written only when a provider reported them.
func (c ChatUsage) AppendJSON(b []byte) []byte {
	total := c.Total
	if total == 0 {
		total = c.Prompt + c.Completion
	}
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, c.Prompt, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, c.Completion, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, total, 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, c.Cached, 10)
	if c.HasCacheWrite {
		b = append(b, `,"cache_write_tokens":`...)
		b = strconv.AppendInt(b, c.CacheWrite, 10)
	}
	b = c.appendExtra(b, 0, 1)
	b = append(b, '}')
	// completion_tokens_details holds what a provider reported: a sum over
	// a tool loop's rounds shows what a relayed answer shows (Anthropic
	// reports no reasoning count; a 0 would say the thinking cost none).
	reasoning := c.HasReasoning || c.Reasoning != 0
	if reasoning || c.HasExtra[1] || c.HasExtra[2] || c.HasExtra[3] {
		b = append(b, `,"completion_tokens_details":{`...)
		n := len(b)
		if reasoning {
			b = append(b, `"reasoning_tokens":`...)
			b = strconv.AppendInt(b, c.Reasoning, 10)
		}
		b = c.appendExtra(b, 1, 4)
		if len(b) > n && b[n] == ',' {
			b = append(b[:n], b[n+1:]...) // no reasoning count: the first extra opens the object
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendExtra appends the reported members of c.Extra[from:to].
func (c ChatUsage) appendExtra(b []byte, from, to int) []byte {
	for i := from; i < to; i++ {
		if c.HasExtra[i] {
			b = append(append(append(b, `,"`...), extraDetails[i][1]...), `":`...)
			b = strconv.AppendInt(b, c.Extra[i], 10)
		}
	}
	return b
}

// first sets *n to v's number the first time a key is seen.
// first reads the first of a repeated count into n; it reports false when
// that first one is present, not null, and not a count.
func first(seen *bool, n *int64, v gjson.Result) bool {
	if *seen {
		return true
	}
	*seen = true
	var ok bool
	*n, ok = TokenCount(v)
	return ok || v.Type == gjson.Null
}

// ParseResponsesUsage reads a Responses API usage object (input_tokens,
// output_tokens, total_tokens and their details) as the chat counts it
// stands for. ok is false when u is not an object.
func ParseResponsesUsage(u gjson.Result) (c ChatUsage, ok bool) {
	if !u.IsObject() {
		return c, false
	}
	r := gjson.GetMany(u.Raw, "input_tokens", "output_tokens", "total_tokens",
		"input_tokens_details.cached_tokens", "output_tokens_details.reasoning_tokens")
	for i, dst := range [...]*int64{&c.Prompt, &c.Completion, &c.Total} {
		var ok bool
		if *dst, ok = TokenCount(r[i]); !ok && r[i].Exists() && r[i].Type != gjson.Null {
			return ChatUsage{}, false // as ParseChatUsage: no report at all
		}
	}
	c.Cached, c.Reasoning, c.HasReasoning = detail(r[3]), detail(r[4]), r[4].Exists()
	c.Cached = min(c.Cached, c.Prompt) // part of the input, as ParseChatUsage reads it
	return c, true
}
