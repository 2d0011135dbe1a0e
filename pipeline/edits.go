package pipeline

// EditLog is context editing's record of the edits made for one client
// request. The tool loop puts one log on every round's Request
// (Request.EditLog), so that each round gets the earlier rounds' edits on the
// same messages and the provider's cached prefix stays byte-identical.
// contextedit.EditLog implements it; the tool loop only reads the counts for
// its trace. Safe for concurrent use.
type EditLog interface {
	// Stats returns the tool results cleared, the tokens that saved (as
	// counted when decided) and the messages dropped so far.
	Stats() (cleared, tokensSaved, droppedMessages int)
}

// PromptHint is what the upstream reported for an earlier round of a tool
// loop: Tokens prompt tokens (usage.prompt_tokens, edits included) for the
// first Messages messages of this request's transcript. Context editing then
// counts only the messages appended since, which is cheaper and closer to
// the provider's own tokenizer. The zero value is no hint. A hint is used only
// together with an EditLog, which guarantees that the prefix is edited as it
// was in that round.
type PromptHint struct {
	Tokens, Messages int
}
