package anthropic

import (
	"errors"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// maxBlocks bounds the content block index a stream may name, so that a
// hostile index cannot make the decoder allocate.
const maxBlocks = 1 << 16

// The kinds of content block a stream opens.
const (
	blockUnstarted byte = iota // no content_block_start named it
	blockOther                 // not shown: redacted thinking, server tools, unknown kinds
	blockText                  // text_delta → content
	blockThinking              // thinking_delta → reasoning_content
	blockToolUse               // input_json_delta → tool-call arguments
)

var (
	errBadEvent = errors.New("anthropic: stream event is not a JSON object")
	errOrder    = errors.New("anthropic: content before message_start")
	errBlock    = errors.New("anthropic: a content block the stream cannot follow (its index out of range, its deltas before its start, a tool_use without a name)")
)

// StreamDecoder turns the events of one Messages stream into
// chat.completion.chunk objects, encoded by wire.ChatSSE: message_start
// opens the message (role chunk), text_delta is content, thinking_delta is
// reasoning_content, a tool_use block is a call header followed by its
// input_json_delta fragments as argument fragments, message_delta is the
// finish chunk and then the usage chunk, and message_stop ends the stream.
// ping and unknown events produce nothing. Feed one event at a time, then
// take the chunks it produced with Pop. Not safe for concurrent use.
type StreamDecoder struct {
	provider string
	h        wire.Header
	enc      *wire.ChatSSE // set by message_start
	blocks   []byte        // kind by content block index
	args     []bool        // by index: a tool_use block got an argument fragment
	u        usage
	stop     string
	finished bool
	done     bool

	// The signed thinking blocks go to sink (NoteThinking); thText and
	// thSig build the thinking block at index thAt (-1: none open).
	sink   *pipeline.Thinking
	thText []byte
	thSig  []byte
	thAt   int

	stops *stopper // the local stop sequences (StopAt); nil: none
	pairs halves   // a surrogate pair split between two deltas

	buf  []byte // the chunks not yet popped, back to back
	ends []int  // end offset of each chunk in buf
	next int    // the next chunk to pop
}

// NewStreamDecoder returns the decoder of one stream; h gives created, the
// client's model and whether the client wants usage (the id is the
// message's).
func NewStreamDecoder(provider string, h wire.Header) *StreamDecoder {
	return &StreamDecoder{provider: provider, h: h}
}

// NoteThinking makes d hand the stream's signed thinking and
// redacted_thinking blocks to t (pipeline.Thinking), each as it ends. They
// are not chunks: the client never sees a signature.
func (d *StreamDecoder) NoteThinking(t *pipeline.Thinking) {
	d.sink, d.thAt = t, -1
}

// StopAt makes d apply the request's local stop sequences (LocalStops)
// to the content, as DecodeMessageStopping does.
func (d *StreamDecoder) StopAt(stops []string) { d.stops = newStopper(stops) }

// EndStopped ends the stream when a local stop sequence has matched (the
// answer the client gets is whole: the model was only writing on past
// it), and reports whether it did: an error event or a cut in that hidden
// tail is no failure of the answer. Its finish is emitted; its usage,
// which the end of the stream would have brought, is not (the meter
// estimates it).
func (d *StreamDecoder) EndStopped() bool {
	if d.stops == nil || !d.stops.stopped || d.done || d.enc == nil {
		return false
	}
	if !d.finished {
		d.finished = true
		d.emit(&wire.Event{Kind: wire.Finish, Finish: finishReason(d.stop)})
	}
	d.done = true
	return true
}

// Done reports whether message_stop came: the stream is complete.
func (d *StreamDecoder) Done() bool { return d.done }

// Pop returns the next chunk Feed produced; the slice is valid until the
// next Feed.
func (d *StreamDecoder) Pop() ([]byte, bool) {
	if d.next >= len(d.ends) {
		return nil, false
	}
	start := 0
	if d.next > 0 {
		start = d.ends[d.next-1]
	}
	d.next++
	return d.buf[start:d.ends[d.next-1]], true
}

// Feed decodes one SSE event's data (the event name is not needed: every
// Messages event names its type in its data). An error event is a
// *pipeline.UpstreamError with the OpenAI envelope of its error; data that
// is not a JSON object, or content before message_start, is
// UpstreamMalformed. data is only read.
func (d *StreamDecoder) Feed(data []byte) error {
	if d.next == len(d.ends) { // everything popped: reuse the buffer
		d.buf, d.ends, d.next = d.buf[:0], d.ends[:0], 0
	}
	if len(data) == 0 {
		return nil
	}
	if data[0] != '{' || !jsonvalid.Bytes(data) {
		return d.malformed(errBadEvent)
	}
	ev := gjson.ParseBytes(data)
	typ := ev.Get("type").Str
	if d.enc == nil && typ != "message_start" && typ != "ping" && typ != "error" {
		return d.malformed(errOrder)
	}
	switch typ {
	case "message_start":
		if d.enc != nil {
			return nil
		}
		msg := ev.Get("message")
		if id := msg.Get("id").Str; id != "" {
			d.h.ID = id
		}
		d.enc = wire.NewChatSSE(d.h)
		d.u.read(msg.Get("usage"))
		d.emit(&wire.Event{Kind: wire.Role})
	case "content_block_start":
		if !d.blockStart(ev) {
			return d.malformed(errBlock)
		}
		if d.thinkingOver() {
			return d.malformed(pipeline.ErrResponseTooLarge)
		}
	case "content_block_delta":
		if !d.blockDelta(ev) {
			return d.malformed(errBlock)
		}
		if d.thinkingOver() {
			return d.malformed(pipeline.ErrResponseTooLarge)
		}
	case "content_block_stop":
		i := int(ev.Get("index").Int())
		if d.kind(i) == blockToolUse && !d.args[i] {
			d.emit(&wire.Event{Kind: wire.CallArgs, Text: []byte("{}")}) // a call without input
		}
		if d.sink != nil && i == d.thAt {
			if len(d.thSig) > 0 { // unsigned, Anthropic would refuse it back
				d.sink.Blocks = appendThinking(d.sink.Blocks, string(d.thText), string(d.thSig), d.callsBefore(i))
			}
			d.thText, d.thSig = d.thText[:0], d.thSig[:0] // counted once, in Blocks
			d.thAt = -1
			if d.thinkingOver() { // Blocks holds the block escaped: larger than its text
				return d.malformed(pipeline.ErrResponseTooLarge)
			}
		}
	case "message_delta":
		if s := ev.Get("delta.stop_reason"); s.Type == gjson.String {
			d.stop = s.Str
		}
		d.u.read(ev.Get("usage"))
		d.finish()
	case "message_stop":
		d.finish()
		d.done = true
	case "error":
		if d.EndStopped() {
			return nil // the answer ended at its stop sequence: the hidden tail's failure is no failure of it
		}
		return eventError(d.provider, data)
	}
	return nil
}

// thinkingOver reports whether the signed reasoning kept for the next
// round (the blocks ended and the one being read) is over the sink's Max:
// an upstream that streams endless thinking, or endless redacted blocks,
// grew the gateway's memory without limit where a relayed stream keeps
// none of it.
func (d *StreamDecoder) thinkingOver() bool {
	return d.sink != nil && d.sink.Max > 0 && len(d.sink.Blocks)+len(d.thText)+len(d.thSig) > d.sink.Max
}

// callsBefore returns how many tool_use blocks the answer began before
// block i (a thinking block's place among the calls: thinking.go).
func (d *StreamDecoder) callsBefore(i int) int {
	n := 0
	for _, k := range d.blocks[:min(i, len(d.blocks))] {
		if k == blockToolUse {
			n++
		}
	}
	return n
}

// blockStart opens a content block; it reports false for one the stream
// cannot follow: an index that is not one of [0, maxBlocks), or a tool_use
// without a name. Such a block, ignored, would lose the text or the call it
// carries, and the answer would end as a whole one (a tool_use stop with
// no call is a "stop").
func (d *StreamDecoder) blockStart(ev gjson.Result) bool {
	i, ok := blockIndex(ev)
	if !ok {
		return false
	}
	for len(d.blocks) <= i {
		d.blocks = append(d.blocks, blockUnstarted)
		d.args = append(d.args, false)
	}
	d.blocks[i] = blockOther
	cb := ev.Get("content_block")
	switch cb.Get("type").Str {
	case "text":
		d.blocks[i] = blockText
		d.text("content", cb.Get("text").Str)
	case "thinking":
		d.blocks[i] = blockThinking
		d.text("reasoning_content", cb.Get("thinking").Str)
		if d.sink != nil {
			d.thAt = i
			d.thText = append(d.thText[:0], cb.Get("thinking").Str...)
			d.thSig = append(d.thSig[:0], cb.Get("signature").Str...)
		}
	case "redacted_thinking":
		if data := cb.Get("data").Str; d.sink != nil && data != "" {
			d.sink.Blocks = appendRedacted(d.sink.Blocks, data, d.callsBefore(i))
		}
	case "tool_use":
		name := cb.Get("name")
		if name.Type != gjson.String || name.Str == "" {
			return false
		}
		d.blocks[i] = blockToolUse
		d.emit(&wire.Event{Kind: wire.CallHeader, ID: cb.Get("id").Str, Name: name.Str})
		if in := cb.Get("input"); hasInput(in) { // a call sent whole
			d.args[i] = true
			d.emit(&wire.Event{Kind: wire.CallArgs, Text: []byte(in.Raw)})
		}
	}
	return true
}

// blockIndex reads an event's content block index: an integer in [0,
// maxBlocks); none is 0 (a server that speaks the API loosely and sends
// one block).
func blockIndex(ev gjson.Result) (int, bool) {
	v := ev.Get("index")
	if !v.Exists() {
		return 0, true
	}
	if v.Type != gjson.Number || v.Num < 0 || v.Num >= maxBlocks || v.Num != float64(int(v.Num)) {
		return 0, false
	}
	return int(v.Num), true
}

// blockDelta adds a delta to its block; it reports false for a delta of
// text, thinking or tool input whose block never started (or whose index
// is not one), which it could not place.
func (d *StreamDecoder) blockDelta(ev gjson.Result) bool {
	i, ok := blockIndex(ev)
	delta := ev.Get("delta")
	typ := delta.Get("type").Str
	k := d.kind(i)
	if !ok || k == blockUnstarted {
		switch typ {
		case "text_delta", "thinking_delta", "input_json_delta":
			return false
		}
		return true
	}
	switch typ {
	case "text_delta":
		if k == blockText {
			d.text("content", d.pairs.text(i, delta.Get("text")))
		}
	case "thinking_delta":
		if k == blockThinking {
			t := d.pairs.text(i, delta.Get("thinking"))
			d.text("reasoning_content", t)
			if d.sink != nil && i == d.thAt {
				d.thText = append(d.thText, t...)
			}
		}
	case "signature_delta":
		if d.sink != nil && k == blockThinking && i == d.thAt {
			d.thSig = append(d.thSig, delta.Get("signature").Str...)
		}
	case "input_json_delta":
		if k == blockToolUse {
			if p := d.pairs.text(i, delta.Get("partial_json")); p != "" {
				d.args[i] = true
				d.emit(&wire.Event{Kind: wire.CallArgs, Text: []byte(p)})
			}
		}
	}
	return true
}

// kind is the kind of block i, blockUnstarted when it was never started.
func (d *StreamDecoder) kind(i int) byte {
	if i < 0 || i >= len(d.blocks) {
		return blockUnstarted
	}
	return d.blocks[i]
}

func (d *StreamDecoder) text(key, s string) {
	if s != "" {
		d.emit(&wire.Event{Kind: wire.Text, Key: key, Text: []byte(s)})
	}
}

// finish emits the finish chunk and the usage chunk, once.
func (d *StreamDecoder) finish() {
	if d.finished {
		return
	}
	d.finished = true
	d.emit(&wire.Event{Kind: wire.Finish, Finish: finishReason(d.stop)})
	d.emit(&wire.Event{Kind: wire.Usage, Raw: d.u.appendChat(nil)})
}

// emit encodes e as the next chunk, when the stream rules (and the local
// stop sequences) let it be one.
func (d *StreamDecoder) emit(e *wire.Event) {
	if d.stops != nil {
		flush, show := d.stops.filter(e)
		if flush != nil {
			d.encode(&wire.Event{Kind: wire.Text, Key: "content", Text: flush})
		}
		if !show {
			return
		}
	}
	d.encode(e)
}

func (d *StreamDecoder) encode(e *wire.Event) {
	n := len(d.buf)
	d.buf = d.enc.Encode(d.buf, e)
	if len(d.buf) > n {
		d.ends = append(d.ends, len(d.buf))
	}
}

func (d *StreamDecoder) malformed(err error) error {
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamMalformed, Provider: d.provider, Err: err}
}
