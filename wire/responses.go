package wire

// Responses is the seam for the Responses API (/v1/responses), which
// issue 16 implements. It will be an Encoder of the same events:
//
//   - Role: response.created and response.in_progress (the response object
//     with status "in_progress"), then response.output_item.added for the
//     message item;
//   - Text: response.output_text.delta (Key "content"), or the refusal and
//     reasoning deltas of their items; the item's *.done events are written
//     when the next item starts or at Finish;
//   - CallHeader / CallArgs: a function_call output item
//     (response.output_item.added, response.function_call_arguments.delta,
//     then .done with the whole arguments): the call's id is its call_id;
//   - Finish and Usage: response.completed, or response.incomplete with
//     incomplete_details.reason "max_output_tokens" for "length" and
//     "content_filter" for "content_filter", carrying usage renamed to
//     input_tokens / output_tokens;
//   - End: the stream form appends nothing (the sink ends the stream), the
//     JSON form appends the response object.
//
// Unlike ChatSSE, one event may become several SSE events (each with its
// own "event:" line and sequence_number), so the stream form needs a sink
// that frames typed events; the SSE sink writes data-only events today.
// Errors stay Go errors from the stream's Next; the sink writes them as the
// Responses API's "error" event.
type Responses interface {
	Encoder
	// Object appends the response object as it stands (status, output
	// items so far, usage): the body of a JSON answer, and the payload of
	// response.created / response.completed.
	Object(dst []byte) []byte
}
