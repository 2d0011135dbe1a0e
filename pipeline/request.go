package pipeline

import "time"

// Request is one chat call travelling through the layers.
//
// Body is the OpenAI request JSON, validated once at ingress. The pipeline owns
// it: a middleware that edits the body stores a new slice in Body (sjson
// returns one) and never writes into the old one, because an outer layer or a
// retry may still read it. A Request is used by one goroutine at a time;
// Clone before handing a copy to another.
type Request struct {
	ID     string    // request id (the client's x-request-id or a generated one)
	Start  time.Time // when the gateway received the request
	Body   []byte
	Model  string // the model name the client asked for; every response shows this name
	Stream bool
	// IncludeUsage records whether the client asked for a usage chunk
	// (stream_options.include_usage); the gateway may ask the upstream for one
	// anyway and strip it.
	IncludeUsage bool

	// Endpoint is the API path the body was sent to, for the policies that
	// differ by endpoint (which fields cap output tokens). "" and
	// ChatEndpoint both mean chat completions.
	Endpoint string

	// Tools is the raw "tools" array of the client's body as ingress found
	// it (read-only; it may share memory with Body), so that a layer can
	// look at the client's tools without parsing the whole body. nil when
	// the body has none or the request was not built by ingress. A layer
	// that changes the body's tools sets it to the new array.
	Tools []byte

	Route  *Route  // the resolved model, set at ingress
	Target *Target // the deployment this attempt goes to; set by fallback, else Route.Deployments[0]
	Tenant *Tenant // the caller, resolved by the policies middleware; nil when the gateway is open

	Hints Hints // per-request gateway headers

	// TraceID is the request's trace id (hex) when it is traced, for logs.
	TraceID string

	// Credential is the bearer token the client sent, for the policies
	// middleware to check. Never log it.
	Credential string

	// Meta collects what the layers report back to the client as response
	// headers. It is shared by the clones of one client request.
	Meta *Meta

	// Lookahead, on a streamed request, is where the upstream stream being
	// read says whether its next event is already buffered, so that the
	// client's writer can coalesce a burst into one write. Shared by
	// clones; nil when nobody asks.
	Lookahead *Lookahead

	// Usage, on a streamed request, is where the meter notes the usage of
	// every upstream call made for it (UsageLog). Shared by clones; nil when
	// nobody reads it.
	Usage *UsageLog

	// EditLog and PromptHint carry context editing's state from one round
	// of a tool loop to the next (pipeline/edits.go). The tool loop sets them
	// on each round's request; a request that is not a round (a summary, an
	// agent tool's call) has neither and is edited on its own.
	EditLog    EditLog
	PromptHint PromptHint

	// Messages says how Body's messages relate to the client's, for an
	// upstream error that names one (messagemap.go). A layer that adds,
	// drops or merges messages records it on the request it passes on.
	Messages MessageMap

	// OnServerCall, when set, hears of every server tool the loop ran for
	// this request, after it ran, in the order the loop records them (the
	// Responses API shows them as mcp_call items). It is called by the
	// goroutine that drives the loop: for a stream, from within its Next.
	OnServerCall func(*ServerCall)
	// OnSettled, when set, hears what the model is shown, in place of a
	// person's decision, for each call that awaited approval (the run's
	// result, a rejection, the person's own answer), so that a stored
	// history can keep it: the loop's record of the approval expires long
	// before a stored response does. The content is valid only during the
	// call.
	OnSettled func(id string, content []byte)

	// MaxToolCalls, when LimitToolCalls is set, is the client's own cap on
	// the server tool calls of the request (the Responses API's
	// max_tool_calls); the tool loop takes the lower of it and its config's.
	MaxToolCalls   int
	LimitToolCalls bool

	// FinalRound is set by the tool loop on the forced final round it
	// made (tool_choice "none", its budget spent): a model that calls a
	// tool anyway has the call read and passed up as a call, so that the
	// loop ends the answer by its rule (finish "length"). Without it, a
	// client's own tool_choice "none" gets no calls.
	FinalRound bool

	// Round numbers the tool loop's model calls of one client request
	// (0: the first, or a request outside the loop). A tracer tells a
	// round from a retry by it: a round calls the same deployment anew.
	Round int

	// Thinking, when set, receives the signed reasoning blocks of the
	// answer (see Thinking). The tool loop sets a new one on each round's
	// request; nil costs nothing and collects nothing.
	Thinking *Thinking

	fields fieldMemo // what Field found in Body
}

// ApprovalIDPrefix starts the id of every call the tool loop hands to the
// client for a person's approval (a gated server tool).
const ApprovalIDPrefix = "call_gwa_"

// ServerCall is one run of a server-side tool, as OnServerCall hears it.
// Its slices are valid only during the call.
type ServerCall struct {
	Name      string
	Source    string // where the tool lives: the MCP server's name, or the tool's kind (builtin, http, agent)
	Arguments []byte
	Output    []byte
	IsError   bool
	// Repeatable: the tool is marked idempotent (or says it only reads),
	// so an answer it took part in may be served again without running it
	// (the response cache stores no answer a call without it took part in).
	Repeatable bool
	// At is set by a loop that answers with one JSON body: how much of
	// the answer message's texts the rounds had produced when the call ran,
	// so that the Responses API places its item where a stream of the same
	// request carries it. Nil for a stream, whose calls are heard in place.
	At *TextsAt
	// AfterClientCalls is set by such a loop for a call of a round that
	// also handed client calls back (a mixed turn): a stream carries those
	// calls before it, as it hands them out while the round is read.
	AfterClientCalls bool
	// ApprovalID is the id of the approval request a person answered, for
	// a gated call run on their approval; "" for any other.
	ApprovalID string
}

// TextsAt counts bytes of each text of an answer message.
type TextsAt struct {
	// A layer that rewrites the content after the loop (a redacting
	// guardrail) moves Content to the rewritten text's length before the
	// call, and rewrites the content's logprobs to match it: the tokens
	// before the call still cover Content bytes.
	Content, Refusal, ReasoningContent, Reasoning int
}

// Of returns the count for the message member key ("content", "refusal",
// "reasoning_content" or "reasoning"); nil for another key.
func (t *TextsAt) Of(key string) *int {
	switch key {
	case "content":
		return &t.Content
	case "refusal":
		return &t.Refusal
	case "reasoning_content":
		return &t.ReasoningContent
	case "reasoning":
		return &t.Reasoning
	}
	return nil
}

// ChatEndpoint is the chat completions path, the pipeline's own endpoint.
const ChatEndpoint = "/v1/chat/completions"

// InputTokensEndpoint is the Responses API's count of a request's input
// tokens: it calls no model, so it takes a request from the limits, and no
// tokens.
const InputTokensEndpoint = "/v1/responses/input_tokens"

// Hints are the gateway's own request headers, copied at ingress.
type Hints struct {
	Cache     string // x-gateway-cache: "", "no-cache", "no-store" or "ttl=N"
	ToolTrace bool   // x-gateway-tool-trace: 1

	TraceParent, TraceState string // W3C trace context the client sent
}

// Clone returns a shallow copy whose Body may be replaced independently.
//
// Not inlined: the copy would otherwise take the request's size in the
// stack frame of every caller, for as long as that caller waits on the
// model call it makes.
//
//go:noinline
func (r *Request) Clone() *Request {
	c := *r
	return &c
}

// TargetOrDefault returns the deployment this attempt goes to.
func (r *Request) TargetOrDefault() *Target {
	if r.Target != nil {
		return r.Target
	}
	if r.Route != nil && len(r.Route.Deployments) > 0 {
		return &r.Route.Deployments[0]
	}
	return nil
}

// Route is a client-facing model resolved from config once at start.
// Routes are immutable and shared by every request.
type Route struct {
	Name          string   // client-facing name
	ContextWindow int      // tokens; 0 = unknown
	Encoding      string   // tokenizer encoding for context editing
	Deployments   []Target // where the model is served, with weights
	Fallbacks     []string // other routes to try, in order
	ModelLayer    Handler  // the model-call chain configured for this model
}

// Target is one deployment: a provider and the model name it knows.
type Target struct {
	Provider string
	Upstream string // model name sent upstream
	Weight   int
	Model    string // the Route this deployment belongs to
}
