package wiretest

import "github.com/tidwall/gjson"

// maxChoices is the SDKs' limit (Go 0…127, Node MAX_STREAM_CHOICES).
const maxChoices = 128

// choice checks one entry of a chunk's choices; seen holds the indices
// already present in this chunk.
func (c *checker) choice(ch gjson.Result, seen map[int64]bool) *Violation {
	if !ch.IsObject() {
		return c.fail(RuleChoices, "choice %s is not an object", rawOr(ch))
	}
	r := ch.Get("index")
	if !isNonNegInt(r) || r.Int() >= maxChoices {
		return c.fail(RuleChoiceIndex, "choice index = %s, want an integer 0…127", rawOr(r))
	}
	idx := r.Int()
	if seen[idx] {
		return c.fail(RuleChoiceIndex, "choice %d twice in one chunk", idx)
	}
	seen[idx] = true
	first := false
	switch {
	case idx == int64(len(c.choices)):
		c.choices = append(c.choices, choiceState{cur: -1})
		c.sum.Choices = len(c.choices)
		first = true
	case idx > int64(len(c.choices)):
		return c.fail(RuleChoiceIndex, "choice %d introduced before choice %d", idx, len(c.choices))
	}
	st := &c.choices[idx]
	if st.finished {
		return c.fail(RuleFinish, "choice %d appears again after its finish chunk (finish_reason %q)", idx, st.finishRsn)
	}
	fr := ch.Get("finish_reason")
	if !fr.Exists() {
		return c.fail(RuleFinishKey, "choice %d lacks the finish_reason key (send null until the end)", idx)
	}
	delta := ch.Get("delta")
	if !delta.IsObject() {
		return c.fail(RuleDelta, "choice %d delta = %s, want an object", idx, rawOr(delta))
	}
	if v := c.delta(st, idx, delta, first); v != nil {
		return v
	}
	if fr.Type == gjson.Null {
		return nil
	}
	if fr.Type != gjson.String || fr.Str == "" {
		return c.fail(RuleFinish, "finish_reason = %s, want null or a non-empty string", fr.Raw)
	}
	if len(delta.Map()) != 0 {
		return c.fail(RuleFinish, "finish chunk of choice %d has a non-empty delta %s; send the finish in its own chunk with delta {}", idx, clip([]byte(delta.Raw)))
	}
	switch {
	case st.calls > 0 && fr.Str != "tool_calls" && fr.Str != "length" && fr.Str != "content_filter":
		// An upstream that cut the answer says so even after a call.
		return c.fail(RuleFinish, "choice %d streamed tool calls but finished with %q, want \"tool_calls\" (or a cut: \"length\", \"content_filter\")", idx, fr.Str)
	case st.calls == 0 && fr.Str == "tool_calls":
		return c.fail(RuleFinish, "choice %d finished with \"tool_calls\" but streamed no tool call", idx)
	}
	st.finished, st.finishRsn = true, fr.Str
	if idx == 0 {
		c.sum.FinishReason = fr.Str
	}
	return nil
}

// delta checks one choice delta: role once and first, content shape, tool calls.
func (c *checker) delta(st *choiceState, idx int64, delta gjson.Result, first bool) *Violation {
	role := delta.Get("role")
	switch {
	case first && !role.Exists():
		return c.fail(RuleRole, "first delta of choice %d has no role", idx)
	case first && (role.Type != gjson.String || role.Str != "assistant"):
		return c.fail(RuleRole, `role = %s, want "assistant"`, role.Raw)
	case !first && role.Exists():
		return c.fail(RuleRole, "role repeated in a later delta of choice %d", idx)
	}
	content := delta.Get("content")
	if content.Exists() && content.Type != gjson.String && content.Type != gjson.Null {
		return c.fail(RuleContent, "content = %s, want a string or null", clip([]byte(content.Raw)))
	}
	calls := delta.Get("tool_calls")
	if !calls.Exists() || calls.Type == gjson.Null {
		if idx == 0 && content.Type == gjson.String {
			c.content.WriteString(content.Str)
		}
		return nil
	}
	if content.Type == gjson.String {
		return c.fail(RuleContent, "content %s on a chunk carrying tool_calls; use null or omit it", content.Raw)
	}
	if !calls.IsArray() {
		return c.fail(RuleToolCalls, "tool_calls = %s, want an array", clip([]byte(calls.Raw)))
	}
	entries := calls.Array()
	switch len(entries) {
	case 0:
		return c.fail(RuleToolCalls, "tool_calls is [] (old openai-go panics on it)")
	case 1:
	default:
		return c.fail(RuleToolCalls, "%d tool-call entries in one chunk; send one per chunk", len(entries))
	}
	return c.toolCall(st, idx, entries[0])
}

// toolCall checks one tool-call entry against docs/wire.md rules 8 to 10.
func (c *checker) toolCall(st *choiceState, choice int64, e gjson.Result) *Violation {
	if !e.IsObject() {
		return c.fail(RuleToolCalls, "tool-call entry %s is not an object", rawOr(e))
	}
	r := e.Get("index")
	if !isNonNegInt(r) {
		return c.fail(RuleToolIndex, "tool-call index = %s, want an integer >= 0", rawOr(r))
	}
	i := int(r.Int())
	fn := e.Get("function")
	args := fn.Get("arguments")
	switch {
	case i > st.calls:
		return c.fail(RuleToolIndex, "tool-call index %d is sparse: next new index must be %d", i, st.calls)
	case i == st.calls: // the first delta of a new call
		id, typ, name := e.Get("id"), e.Get("type"), fn.Get("name")
		switch {
		case id.Type != gjson.String || id.Str == "":
			return c.fail(RuleToolFirst, "first delta of tool call %d: id = %s, want a non-empty string", i, rawOr(id))
		case typ.Type != gjson.String || typ.Str != "function":
			return c.fail(RuleToolFirst, `first delta of tool call %d: type = %s, want "function"`, i, rawOr(typ))
		case name.Type != gjson.String || name.Str == "":
			return c.fail(RuleToolFirst, "first delta of tool call %d: function.name = %s, want the full name", i, rawOr(name))
		case args.Type != gjson.String:
			return c.fail(RuleToolFirst, `first delta of tool call %d: function.arguments = %s, want a string (may be "")`, i, rawOr(args))
		}
		st.calls++
		st.cur = i
		if choice == 0 {
			c.sum.ToolCalls = append(c.sum.ToolCalls, ToolCall{Index: i, ID: id.Str, Name: name.Str, Arguments: args.Str})
		}
		return nil
	case i != st.cur:
		return c.fail(RuleToolInterleave, "fragment for tool call %d after tool call %d started", i, st.cur)
	}
	// A later fragment: only index and function.arguments.
	var bad string
	e.ForEach(func(k, _ gjson.Result) bool {
		if k.Str != "index" && k.Str != "function" {
			bad = k.Str
		}
		return bad == ""
	})
	if bad == "" && fn.IsObject() {
		fn.ForEach(func(k, _ gjson.Result) bool {
			if k.Str != "arguments" {
				bad = "function." + k.Str
			}
			return bad == ""
		})
	}
	if bad != "" {
		return c.fail(RuleToolFragment, "later delta of tool call %d repeats %q; send only index and function.arguments", i, bad)
	}
	if args.Type != gjson.String {
		return c.fail(RuleToolFragment, "later delta of tool call %d: function.arguments = %s, want a string", i, rawOr(args))
	}
	if choice == 0 {
		c.sum.ToolCalls[i].Arguments += args.Str
	}
	return nil
}

// isNonNegInt reports whether r is a JSON integer >= 0.
func isNonNegInt(r gjson.Result) bool {
	if r.Type != gjson.Number || r.Num < 0 || r.Num != float64(int64(r.Num)) {
		return false
	}
	for _, b := range r.Raw {
		if b == '.' || b == 'e' || b == 'E' {
			return false
		}
	}
	return true
}
