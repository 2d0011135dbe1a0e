package wiretest

import "fmt"

// Rule names the wire rule a stream broke. Tests compare Violation.Rule with
// these constants to make sure the intended rule, not another, fired.
type Rule string

// The rules CheckStream enforces (docs/wire.md; each rule there names its Rule constant).
const (
	RuleFraming        Rule = "framing"          // line endings, blank-line terminators, allowed SSE lines
	RuleUTF8           Rule = "utf8"             // invalid UTF-8 or an unpaired \uD800-\uDFFF escape
	RuleJSON           Rule = "json"             // chunk is not one JSON object
	RuleErrorKey       Rule = "error-key"        // top-level "error" key in a normal chunk, even null
	RuleObject         Rule = "object"           // object is not "chat.completion.chunk"
	RuleID             Rule = "id"               // id missing, empty or changed
	RuleCreated        Rule = "created"          // created missing, not an integer or changed
	RuleModel          Rule = "model"            // model missing, empty or changed
	RuleChoices        Rule = "choices"          // choices missing or not an array
	RuleChoiceIndex    Rule = "choice-index"     // choice index missing, repeated, or not introduced densely in order
	RuleFinishKey      Rule = "finish-key"       // a choice without the finish_reason key
	RuleDelta          Rule = "delta"            // a choice without a delta object
	RuleRole           Rule = "role"             // role missing from the first delta, repeated, or not "assistant"
	RuleContent        Rule = "content"          // content not string/null, or non-null on a tool-call chunk
	RuleToolCalls      Rule = "tool-calls"       // tool_calls not a non-empty array, or more than one entry per chunk
	RuleToolFirst      Rule = "tool-first-delta" // first delta of a call lacks id, type "function", name or arguments
	RuleToolFragment   Rule = "tool-fragment"    // a later delta repeats id/type/name or carries other keys
	RuleToolIndex      Rule = "tool-index"       // missing, negative or sparse tool-call index
	RuleToolInterleave Rule = "tool-interleave"  // a fragment for a call after the next call started
	RuleFinish         Rule = "finish"           // finish chunk not alone, repeated, missing, or inconsistent with tool calls
	RuleUsage          Rule = "usage"            // usage unwanted, missing, repeated, not last, or with choices
	RuleDone           Rule = "done"             // [DONE] missing, malformed, misplaced, or present on an error stream
	RuleErrorEvent     Rule = "error-event"      // unexpected, malformed or misplaced error event
)

// Violation is the first wire-rule violation CheckStream found. It is a
// plain value, safe to share once returned.
type Violation struct {
	// Chunk is the 1-based number of the data event (chunk, [DONE] or error
	// event) where the rule broke, or 0 when the problem lies outside one.
	Chunk int
	// Line is the 1-based line of raw where the offending event starts.
	Line int
	// Rule names the broken rule.
	Rule Rule
	// Msg says what was wrong, in words.
	Msg string
}

// Error implements error.
func (v *Violation) Error() string {
	return fmt.Sprintf("wiretest: chunk %d (line %d): %s: %s", v.Chunk, v.Line, v.Rule, v.Msg)
}
