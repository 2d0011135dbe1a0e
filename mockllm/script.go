// Package mockllm is a scripted OpenAI-compatible model server: the test double
// of the gateway's upstreams, the load target of bench/, and the offline "demo"
// model of the shipped config.
//
// A Server answers POST /v1/chat/completions (streaming and not), POST
// /v1/messages (Anthropic's Messages API: the same scripts, validated and
// answered in Anthropic's form, see messages.go), GET /v1/models, and
// echoes any other /v1/* request. What it answers is decided
// per call by Options.Respond, a function from the parsed request (Call) to a
// scripted Turn: text, tool calls, usage, a Fault to inject, or a chunking
// override. Output follows the OpenAI wire format exactly unless a Chunking
// flag asks for a misbehaving upstream on purpose.
//
// Everything is deterministic given the script: ids are counters
// (chatcmpl-mock-<n>, call_<n>), usage is estimated from byte lengths, and
// fault offsets are counted in SSE events.
package mockllm

import (
	"time"

	"github.com/rs/zerolog"
)

// Options configures a Server. The Server keeps its own copy of the maps; the
// caller may reuse Options after New.
type Options struct {
	// Respond scripts each chat completion; nil means DemoResponder. It is
	// called concurrently from many connections and must be safe for that.
	Respond func(*Call) Turn
	// FirstByteDelay is slept before the first byte of every chat completion
	// response (status faults included).
	FirstByteDelay time.Duration
	// ChunkDelay is slept between two SSE events of a stream.
	ChunkDelay time.Duration
	// StampHeld puts on every chat chunk of a stream the time the mock
	// held the request until it wrote that chunk, as a first field
	// "x_mock_held_ns" (nanoseconds), and the wall-clock time the request
	// came ("x_mock_received_unix_ns"): a load generator on the same
	// machine subtracts them to measure the path to and from the mock
	// without the mock's own delays and timer slack.
	StampHeld bool
	// Chunking shapes streamed output; zero fields take their defaults.
	Chunking Chunking
	// ContextWindow maps a model name to its window in tokens. A request whose
	// estimated prompt exceeds it is refused with 400 context_length_exceeded.
	ContextWindow map[string]int
	// Models are listed by GET /v1/models; nil lists "demo" and the models of
	// ContextWindow.
	Models []string
	// MaxRecorded bounds Requests(): the most recent MaxRecorded requests are
	// kept. 0 means 10000; a negative value disables recording (load tests).
	MaxRecorded int
	// Logger receives debug lines for faults and refused requests; nil is silent.
	Logger *zerolog.Logger
}

// Chunking shapes a streamed answer. Zero values mean the defaults.
type Chunking struct {
	// TextRunes is the number of runes per content delta; default 4.
	TextRunes int
	// ArgBytes is the approximate byte length of one tool-argument fragment,
	// cut on rune boundaries but in the middle of JSON tokens; default 5.
	ArgBytes int
	// SplitWrites writes each SSE event to the socket in 2 or 3 pieces at
	// awkward byte offsets (inside "data:", between the two newlines, inside
	// a multi-byte UTF-8 character), flushing and pausing briefly between the
	// pieces, so the reader sees partial events.
	SplitWrites bool
	// InterleaveToolCalls emits the deltas of parallel tool calls round-robin
	// (0,1,0,1,...) instead of one call after the other. It models a
	// misbehaving upstream.
	InterleaveToolCalls bool
	// WholeToolCalls sends each tool call in one delta holding index, id,
	// type, name and the complete arguments.
	WholeToolCalls bool
	// Burst flushes only after the last event, so the whole stream reaches
	// the socket at once, as from an upstream that sends a finished answer
	// in one go.
	Burst bool
	// Gate, when set, is called before each SSE data event n (0-based)
	// is written, and may block: a test holds the stream there.
	Gate func(n int)
}

func (c Chunking) withDefaults() Chunking {
	if c.TextRunes <= 0 {
		c.TextRunes = 4
	}
	if c.ArgBytes <= 0 {
		c.ArgBytes = 5
	}
	return c
}

// Call is one chat completion request as a responder sees it. Body and the
// Header function are valid only while Respond runs (they point into the
// server's request buffers); copy what you keep. Strings are owned by the Call.
type Call struct {
	Model string
	// Body is the raw request JSON.
	Body []byte
	// N is the 1-based number of chat completion requests seen so far for
	// Model, this one included.
	N int
	// LastRole and LastText describe the last message; LastText joins the
	// text parts of an array content.
	LastRole string
	LastText string
	// Tools are the names of the offered tools, in request order.
	Tools []string
	// ToolResults are the contents of the tool messages that end the history.
	ToolResults []string
	// Header returns a request header value ("" when absent).
	Header func(name string) string
	// Stream reports whether the client asked for a stream.
	Stream bool
}

// Offers reports whether a tool named name was offered.
func (c *Call) Offers(name string) bool {
	for _, t := range c.Tools {
		if t == name {
			return true
		}
	}
	return false
}

// Turn is the scripted answer to one Call. The zero Turn is an empty text
// answer.
type Turn struct {
	// Text is the assistant content, streamed in TextRunes-rune deltas.
	Text string
	// Thinking is a thinking block before the text, in the Anthropic
	// Messages mode only (chat completions have no place for it).
	Thinking string
	// ToolCalls follow the text; they make the default finish "tool_calls".
	ToolCalls []ToolCall
	// FinishReason overrides the default ("stop", or "tool_calls").
	FinishReason string
	// Usage overrides the estimated token counts.
	Usage *Usage
	// Fault injects a failure instead of (or in the middle of) the answer.
	Fault *Fault
	// Chunking replaces Options.Chunking (as a whole) for this turn.
	Chunking *Chunking
}

// ToolCall is one function call of a Turn. An empty ID becomes "call_<n>",
// n counting tool calls across the server's life.
type ToolCall struct {
	ID, Name, Arguments string
}

// Usage is reported token usage. Cached is part of Prompt (as in OpenAI's
// prompt_tokens_details.cached_tokens); CacheWrite is reported as
// prompt_tokens_details.cache_write_tokens when positive.
type Usage struct {
	Prompt, Completion, Cached, CacheWrite int
}

// Fault is a failure to inject. Each kind is switched on by its own field, so
// the zero value of every offset is meaningful (0 = before the first event).
// Precedence: Reset, then Status, then the stream faults (Stall, then the
// first of Cut / Malformed / ErrorEvent to trigger). Offsets count SSE data
// events of the normal answer (role chunk, deltas, finish chunk, usage chunk).
//
// On non-stream requests: Stall delays the response, Cut sends half of the
// body (with a Content-Length for all of it) and closes, Malformed sends a
// truncated JSON body with 200, ErrorEvent answers with the error envelope and
// Status (default 500), or 200 with ErrorOK.
//
// Empty is not an ending fault: the answer is sent whole, without content.
type Fault struct {
	// Status, when non-zero, answers with this HTTP status and the OpenAI error
	// envelope before any body byte.
	Status int
	// Type, Code and Message fill the envelope; empty ones get defaults that
	// follow OpenAI (e.g. 429 → type "requests", code "rate_limit_exceeded").
	Type, Code, Message string
	// RetryAfter and RetryAfterMs are sent as retry-after / retry-after-ms.
	RetryAfter, RetryAfterMs string
	// Headers are extra response headers (e.g. x-should-retry).
	Headers map[string]string

	// Reset closes the TCP connection without any response.
	Reset bool

	// Cut sends CutAfter events and then closes the connection without
	// [DONE] and without the terminating HTTP chunk.
	Cut      bool
	CutAfter int

	// Malformed sends MalformedAfter events, then a data line that is not
	// valid JSON, then ends the body (no [DONE]).
	Malformed      bool
	MalformedAfter int

	// Stall, when positive, goes silent for Stall after StallAfter events,
	// then carries on normally.
	Stall      time.Duration
	StallAfter int

	// ErrorEvent sends ErrorAfter events, then a mid-stream error
	// "event: error" + data {"error":{...}}, then ends the body (no [DONE]).
	ErrorEvent bool
	ErrorAfter int
	// ErrorOK makes a non-stream ErrorEvent answer 200: the error envelope
	// and no choices, as some OpenAI-compatible providers send. A stream
	// gets the error event all the same.
	ErrorOK bool

	// Empty answers without content: a stream sends the role chunk, the
	// usage chunk when asked for and [DONE] (no text, calls or finish
	// chunk); a non-stream answer has "choices":[]. Chat completions only.
	Empty bool
}

// StatusFault answers with status and the error envelope.
func StatusFault(status int, code, message string) *Fault {
	return &Fault{Status: status, Code: code, Message: message}
}

// ResetFault closes the connection without a response.
func ResetFault() *Fault { return &Fault{Reset: true} }

// CutFault sends n events, then drops the connection.
func CutFault(n int) *Fault { return &Fault{Cut: true, CutAfter: n} }

// MalformedFault sends n events, then an invalid data line.
func MalformedFault(n int) *Fault { return &Fault{Malformed: true, MalformedAfter: n} }

// StallFault sends n events, then goes silent for d.
func StallFault(n int, d time.Duration) *Fault { return &Fault{Stall: d, StallAfter: n} }

// EmptyFault answers without content.
func EmptyFault() *Fault { return &Fault{Empty: true} }

// ErrorAnswerFault fails before any content with an error of type typ: a
// stream with an error event first, a non-stream request with 200 and the
// error envelope (no choices).
func ErrorAnswerFault(typ, message string) *Fault {
	return &Fault{ErrorEvent: true, ErrorOK: true, Type: typ, Message: message}
}

// ErrorEventFault sends n events, then a mid-stream error event.
func ErrorEventFault(n int, code, message string) *Fault {
	return &Fault{ErrorEvent: true, ErrorAfter: n, Code: code, Message: message}
}
