package toolloop

import (
	"unsafe"

	"github.com/tidwall/gjson"
)

// completionView is what the loop reads of a chat.completion body: the
// values (views into the body, valid while it is unchanged) of the paths id,
// created, model, usage, system_fingerprint, service_tier, and of the choice
// whose index is 0 (choiceZero, as the stream follows it) its finish_reason,
// logprobs and message.{content, tool_calls, refusal, reasoning_content,
// reasoning}. They are
// found as gjson finds them, in one pass over the body instead of one per
// path: of keys that repeat, a value is the first one's, and a path goes on
// into a later object of a repeated key when an earlier one lacks the rest
// of the path.
type completionView struct {
	id, created, model, usage gjson.Result
	fingerprint, tier         gjson.Result
	finish, logprobs          gjson.Result
	content, toolCalls        gjson.Result
	side                      [len(sideTexts)]gjson.Result
	// stray: choices holds choices, none at index 0 (choiceZero).
	stray bool
}

func readCompletion(body []byte) (c completionView) {
	zeroSeen := false
	defer func() { c.stray = c.stray && !zeroSeen }()
	view(body).ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "id":
			keepFirst(&c.id, v)
		case "created":
			keepFirst(&c.created, v)
		case "model":
			keepFirst(&c.model, v)
		case "usage":
			keepFirst(&c.usage, v)
		case "system_fingerprint":
			keepFirst(&c.fingerprint, v)
		case "service_tier":
			keepFirst(&c.tier, v)
		case "choices":
			if v.IsArray() {
				zero, stray := choiceZero(v) // the one the stream follows
				c.stray = c.stray || stray
				zeroSeen = zeroSeen || zero.Exists()
				c.readChoice(zero)
			} else {
				eachKey(v, "0", c.readChoice)
			}
		}
		return true
	})
	return c
}

func (c *completionView) readChoice(choice gjson.Result) {
	choice.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "finish_reason":
			keepFirst(&c.finish, v)
		case "logprobs":
			keepFirst(&c.logprobs, v)
		case "message":
			c.readMessage(v)
		}
		return true
	})
}

func (c *completionView) readMessage(m gjson.Result) {
	if !m.IsObject() {
		return
	}
	m.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content":
			keepFirst(&c.content, v)
		case "tool_calls":
			keepFirst(&c.toolCalls, v)
		default:
			for i, name := range sideTexts {
				if k.Str == name {
					keepFirst(&c.side[i], v)
				}
			}
		}
		return true
	})
}

// keepFirst sets *dst to v unless an earlier key of the name set it.
func keepFirst(dst *gjson.Result, v gjson.Result) {
	if !dst.Exists() {
		*dst = v
	}
}

// eachKey calls fn with the value of every key of object o named name, in
// order.
func eachKey(o gjson.Result, name string, fn func(gjson.Result)) {
	if !o.IsObject() {
		return
	}
	o.ForEach(func(k, v gjson.Result) bool {
		if k.Str == name {
			fn(v)
		}
		return true
	})
}

// view parses b without copying it (gjson.ParseBytes copies): the Raw and
// Str of what it finds share b's memory, so b must not change while they
// are used.
func view(b []byte) gjson.Result {
	return gjson.Parse(unsafe.String(unsafe.SliceData(b), len(b)))
}
