package wire

// Kind says what an Event carries.
type Kind uint8

const (
	// Role opens the assistant message. It comes first, once.
	Role Kind = iota
	// Text is a fragment of one of the message's texts: Key names it
	// ("content", "refusal", "reasoning_content", "reasoning").
	Text
	// CallHeader starts a client tool call: ID and the complete Name.
	// Calls are numbered 0, 1, 2… in the order their headers come.
	CallHeader
	// CallArgs is a fragment of the arguments of the last call started.
	// Every fragment of a call comes before the next call's header.
	CallArgs
	// Finish ends the choice with Finish as its finish_reason.
	Finish
	// Usage carries the response's usage object (Raw), after Finish.
	Usage
	// ServerCall reports a tool the gateway ran itself, whole: Name, the
	// arguments (Text), the result (Raw, a JSON string's contents), where
	// the tool lives (Key: the MCP server's name, "http", "builtin"…)
	// and, for a failed run, the error (Finish). Only the Responses form
	// shows it: a chat client never sees server calls.
	ServerCall
	// End closes the response: nothing follows it.
	End
	// Extra carries the message's members that no other kind does (a
	// search model's annotations, a provider's own such as
	// reasoning_details): Raw is an object's members as JSON
	// ("key":value,…, each key once). The tool loop sends it at most
	// once, before Finish; a decoded stream (ChunkDecoder) sends one for
	// each chunk that carries annotations. ChatSSE sends it as a delta of
	// its own, ChatJSON puts the members in the message; the Responses
	// form keeps only the annotations, on the message's output_text.
	Extra
)

// Event is one step of a response's neutral output. The encoders copy what
// they keep, so the caller may reuse an Event and its slices once the call
// returns.
type Event struct {
	Kind Kind
	Key  string // Text: the message field the fragment belongs to
	Text []byte // Text, CallArgs: the fragment, unescaped
	ID   string // CallHeader; ServerCall: the approval request a gated run answered ("" if none)
	Name string // CallHeader, ServerCall
	// Approval marks a CallHeader whose call waits for a person's
	// approval: the Responses form shows it as an mcp_approval_request
	// whose id is the call's ID; chat shows an ordinary call.
	Approval bool
	// Index numbers a call's header and fragments (0, 1, 2… in header
	// order). ChatSSE numbers calls itself and ignores it; Responses uses
	// it so that fragments of parallel calls may interleave.
	Index int
	// Finish is the finish_reason of a Finish event.
	Finish string
	// Raw is the usage JSON object of a Usage event, the members of an
	// Extra event, and on a Finish event the response's top-level members
	// no other field carries (a provider's own, such as citations:
	// "key":value,…), which go on the finish chunk or in the object.
	Raw []byte
	// Logprobs, on a Text event, is the choice's logprobs object (valid JSON)
	// of the chunk the fragment came in, or of the chunks it joins
	// (Logprobs); nil when there is none. ChatSSE writes it on the
	// fragment's chunk, ChatJSON joins those of every Text event.
	Logprobs []byte
	// Trace, when set, is the x_gateway object. It goes on the last chunk
	// of a stream (Usage when usage was asked for, else Finish) or on the
	// JSON answer.
	Trace []byte
}

// Header is what every part of one response repeats: the id, created and
// model the client sees, the upstream's system_fingerprint and service_tier
// when known, and whether the client asked for usage
// (stream_options.include_usage).
type Header struct {
	ID           string
	Created      int64
	Model        string
	Fingerprint  string
	ServiceTier  string
	IncludeUsage bool
}

// Encoder turns a response's events into one output form. Encode appends
// the bytes e produces to dst and returns the extended slice: one
// chat.completion.chunk for ChatSSE, nothing until End for the forms that
// build one object. An event the form's rules do not allow (a second role,
// anything after Finish but Usage, usage not asked for) appends nothing.
// An Encoder serves one response; it is not safe for concurrent use.
type Encoder interface {
	Encode(dst []byte, e *Event) []byte
}

var (
	_ Encoder = (*ChatSSE)(nil)
	_ Encoder = (*ChatJSON)(nil)
)
