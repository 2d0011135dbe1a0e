// Package wire turns the neutral output of one chat response (role, text
// deltas, tool-call headers and argument fragments, finish, usage, trace)
// into the bytes of one output form. Each form is an Encoder: ChatSSE
// writes chat.completion.chunk objects, ChatJSON one chat.completion, and
// Responses is where the Responses API's events and objects plug in.
//
// The tool loop's live stream and the response cache's replay both encode
// through ChatSSE, so a replayed stream and a live one follow the same
// rules byte for byte (docs/wire.md rules 5 to 14). The package imports no
// other gateway package but jsonstring.
//
// Errors are not events: a stream that fails returns the error from its
// Next, and the proxy's one error mapper writes it (docs/wire.md rule 17).
package wire
