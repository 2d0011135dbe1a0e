// Package contextedit keeps long tool loops inside the model's context window.
//
// New returns a model-call middleware (it runs once per upstream call inside
// the tool loop, with the Route of the request it gets, so a fallback route
// is edited for its own window). It counts the prompt with the route's
// tiktoken encoding (Counter, the OpenAI cookbook's accounting, offline: the
// BPE files are embedded) and, above the trigger, replaces old tool results
// with a placeholder, oldest first, keeping the most recent ones, as
// Anthropic's clear_tool_uses and LangChain's ContextEditingMiddleware do.
// Tool messages are never removed, so every tool call keeps its result. When
// clearing is not enough the request fails with context_length_exceeded, or
// the oldest whole turns are dropped (last_resort = "drop_turns").
//
// Prompt caching: edits are deterministic and monotonic. With an EditLog on
// the request (Request.EditLog: NewEditLog, once per client request, by the
// tool loop, on every round), every
// round re-applies the earlier edits to the transcript before deciding new
// ones, so a cleared result stays cleared with the same placeholder and the
// edited prefix the provider cached comes back byte for byte. clear_at_least
// makes each new edit large, so the prefix changes rarely. The tool loop may
// keep its transcript unedited, or edit it with EditLog.Apply; both give the
// same request upstream.
//
// Counting: a request whose size in bytes is under the budget is passed on
// without counting (a token is never shorter than a byte; see cheapBound).
// Otherwise string counts are cached, so a later round only tokenizes what
// was appended. Inside the loop, Request.PromptHint passes the previous round's
// usage.prompt_tokens and how many messages it covered; only the messages
// appended since are then counted.
//
// Visibility: the x-gateway-context-edits response header (MetaHeader) and
// the gateway_context_edit_* metrics.
package contextedit
