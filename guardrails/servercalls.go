package guardrails

import (
	"sync"

	"github.com/llmgw/gateway/pipeline"
)

// The Responses API shows each server call the tool loop ran as an item
// between the answer's texts (pipeline.Request.OnServerCall): a stream where
// it hears of the call, a JSON answer at the call's offsets into the texts
// (pipeline.ServerCall.At). The response stage rewrites those texts after
// the loop, so it holds the calls and hands them on where its output puts
// them: a stream's held text is judged and released before the call, and a
// JSON answer's text is judged in the same pieces, the call's offset moved
// to the end of its piece's rewritten text. The content's logprobs are
// rewritten with it (logprobs.go), so the tokens before the call still
// cover the text before it. Both forms thus put each call after the same
// text and tokens (a match across a call is not one text in either).

// heldCalls collects the server calls reported below the guardrails, with
// their slices copied (a ServerCall's are valid only during the call).
type heldCalls struct {
	mu    sync.Mutex
	calls []pipeline.ServerCall
	ats   []pipeline.TextsAt // the calls' At, copied (At points here when set)
	ck    *checker           // judges each call's arguments and output (under mu)
}

// note keeps a copy of c with its arguments and output judged as texts of
// their own, as the answer's are: a Responses client is shown them (an
// mcp_call item). One a guard blocks is shown as a failed call.
func (h *heldCalls) note(c *pipeline.ServerCall) {
	cp := *c
	h.mu.Lock()
	defer h.mu.Unlock()
	cp.Arguments, cp.Output = append([]byte(nil), c.Arguments...), append([]byte(nil), c.Output...)
	if h.ck != nil {
		args, err := judgeArgs(h.ck, cp.Arguments) // JSON text: a redaction must keep it JSON
		args = append([]byte(nil), args...)        // Check's result is valid until its next call
		var out []byte
		if err == nil {
			out, err = h.ck.Check(cp.Output)
		}
		if err != nil {
			cp.Arguments, cp.Output, cp.IsError = []byte("{}"), []byte("the call's text was blocked by a guardrail"), true
		} else {
			cp.Arguments, cp.Output = args, append([]byte(nil), out...)
		}
	}
	var at pipeline.TextsAt
	if c.At != nil {
		at = *c.At
	}
	h.calls = append(h.calls, cp)
	h.ats = append(h.ats, at)
}

// take returns the calls noted since the last take, each At pointing at its
// own copy; nil for a nil h.
func (h *heldCalls) take() []pipeline.ServerCall {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	calls, ats := h.calls, h.ats
	h.calls, h.ats = nil, nil
	for i := range calls {
		if calls[i].At != nil {
			calls[i].At = &ats[i]
		}
	}
	return calls
}

// checkPieces judges text, the first choice's content of a JSON answer
// with server calls among it, in the pieces the calls cut it into (as a
// stream of the same request releases it): each call's At.Content becomes
// the length of the rewritten text before it. It returns the rewritten
// text; ck's edits are those of the whole text.
func checkPieces(ck *checker, text []byte, calls []pipeline.ServerCall) ([]byte, error) {
	var out []byte
	pos, first := 0, true
	judge := func(end int) error {
		end = max(pos, min(end, len(text)))
		part := text[pos:end]
		var got []byte
		var err error
		if first {
			got, err = ck.Check(part)
		} else {
			got, err = ck.CheckMore(part)
		}
		if err != nil {
			return err
		}
		out = append(out, got...)
		pos, first = end, false
		return nil
	}
	for i := range calls {
		at := calls[i].At
		if at == nil {
			continue
		}
		if at.Content > pos {
			if err := judge(at.Content); err != nil {
				return nil, err
			}
		}
		at.Content = len(out)
	}
	if err := judge(len(text)); err != nil {
		return nil, err
	}
	return out, nil
}
