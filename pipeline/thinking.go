package pipeline

// ThinkingMember is the assistant-message member in which the tool loop
// carries a round's signed reasoning blocks (Thinking.Blocks, a JSON array)
// into its next round's request. It is the gateway's own: the Anthropic
// translation turns it back into blocks, every other provider's request is
// sent without it, and no answer to a client holds it.
const ThinkingMember = "x_gateway_thinking"

// Thinking is where an upstream call notes the signed reasoning blocks of
// its answer that the provider wants back on the assistant turn when that
// turn's tool calls are answered: Anthropic's thinking blocks (thinking
// and signature) and redacted_thinking blocks (data), as they came, in a
// JSON array. Blocks is nil when the answer had none. Each upstream call
// made for a request that carries a Thinking sets Blocks anew when it
// starts, so that after retries and fallbacks it holds the last attempt's.
// Blocks is a new slice, owned by the reader once the answer was read. It
// is written by the goroutine that reads the answer and is not safe for
// concurrent use.
type Thinking struct {
	Blocks []byte
	// Max bounds the bytes an answer's blocks may hold, the one being read
	// included (0: no bound): a stream over it fails with ErrResponseTooLarge.
	// A streamed answer is not bounded as a whole, but these are kept.
	Max int
}
