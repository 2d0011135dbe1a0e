package proxy

import "testing"

// A pass-through stream whose usage has a count that is no count is
// charged as one that reports none: the estimate of the output the tap
// saw, not nothing.
func TestTapBadUsageKeepsEstimate(t *testing.T) {
	t.Parallel()
	text := "data: {\"choices\":[{\"text\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}]}\n\n"
	none := newUsageTap([]byte("text/event-stream"))
	none.write([]byte(text + "data: [DONE]\n\n"))
	bad := newUsageTap([]byte("text/event-stream"))
	bad.write([]byte(text + "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":-1}}\n\ndata: [DONE]\n\n"))
	un, okn := none.usage()
	ub, okb := bad.usage()
	if okn || okb || ub != un || un.Completion == 0 {
		t.Fatalf("no usage: %+v %v; a bad usage: %+v %v", un, okn, ub, okb)
	}
}
