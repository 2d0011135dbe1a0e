package toolloop

import (
	"bytes"
	"context"
	"slices"
	"strings"

	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// maxResumeLookups bounds the assistant messages looked up per request (the
// most recent ones): one batched store call, whatever the history's length.
const maxResumeLookups = 16

var metricState = observe.Factory.NewCounterVec(prometheus.CounterOpts{
	Name: "gateway_toolloop_state_total",
	Help: "Mixed-turn state operations: save, save_error, spliced (a follow-up rebuilt), carried (a follow-up that held the hidden rounds itself, left as sent), not_found (an assistant tool-call message without kept state: a client-only turn, or expired/evicted), load_error, load_oversized (a stored turn over tool_loop.state_max_bytes, treated as missing and never read).",
}, []string{"op"})

// resume rebuilds the client's history: every assistant message whose
// tool-call ids are exactly the client calls of a kept mixed turn is
// replaced by the server-only rounds that preceded it in the same client
// request, then the turn's full assistant message (server and client calls,
// in the model's order), then the server calls' tool messages and the
// client's own (those right after its assistant message), together in the
// order of the calls. The upstream then sees the history the model
// produced, with every call paired with its result, in place.
//
// When no state is kept for a turn (expired after tool_loop.state_ttl,
// evicted by the store's bound, or the store unreachable), the message is
// left as the client sent it. That history is still valid, since the
// client's assistant message lists only the client calls and the client
// sends a result for each; the model merely no longer sees the hidden
// server calls of that turn and may call those tools again. No request
// fails because of missing state.
//
// req is not modified: a rebuilt request is a clone with a new Body.
func (l *Loop) resume(ctx context.Context, req *pipeline.Request) *pipeline.Request {
	if !bytes.Contains(req.Body, []byte(`"tool_calls"`)) {
		return req
	}
	msgs := gjson.GetBytes(req.Body, "messages")
	if !msgs.IsArray() {
		return req
	}
	type candidate struct {
		pos int
		ids []string
	}
	var (
		items []gjson.Result
		cands []candidate
	)
	msgs.ForEach(func(_, m gjson.Result) bool {
		items = append(items, m)
		return true
	})
	for i, m := range items {
		if m.Get("role").Str != "assistant" {
			continue
		}
		var ids []string
		calls := m.Get("tool_calls")
		if !calls.IsArray() {
			continue // null: no call (ForEach would visit the null)
		}
		calls.ForEach(func(_, c gjson.Result) bool {
			ids = append(ids, c.Get("id").String())
			return true
		})
		if len(ids) == 0 || ids[0] == "" {
			continue
		}
		cands = append(cands, candidate{pos: i, ids: ids})
	}
	if len(cands) == 0 {
		return req
	}
	if len(cands) > maxResumeLookups {
		cands = cands[len(cands)-maxResumeLookups:]
	}
	keys := make([]string, len(cands))
	for i, c := range cands {
		keys[i] = StateKey(req.Tenant, c.ids[0])
	}
	turns, err := l.opts.State.Load(ctx, keys)
	if err != nil || len(turns) != len(keys) {
		metricState.WithLabelValues("load_error").Inc()
		l.log.Warn().Err(err).Str("request_id", req.ID).Msg("tool loop: mixed-turn state unavailable; the follow-up goes upstream as sent")
		return req
	}
	// What each candidate becomes: its kept turn, or nil (as sent). A turn
	// with earlier rounds also takes the place of the text-only assistant
	// messages just before it (a Responses client sends each round's text
	// as a message of its own; the kept rounds hold them).
	skip := map[int]bool{}
	for ci, c := range cands {
		t := turns[ci]
		switch {
		case t == nil || !sameIDs(c.ids, t.ClientIDs):
			turns[ci] = nil
			metricState.WithLabelValues("not_found").Inc()
		case carried(items[:c.pos], t.Prior):
			// The client sent the turn's earlier server rounds itself (a
			// Responses client replaying mcp_call items with their
			// output): as sent.
			metricState.WithLabelValues("carried").Inc()
			turns[ci] = nil
		case len(t.Prior) > 0:
			for j := c.pos - 1; j >= 0 && items[j].Get("role").Str == "assistant" && !items[j].Get("tool_calls").IsArray(); j-- {
				skip[j] = true
			}
		}
	}
	out := make([]byte, 0, len(msgs.Raw)+1024)
	out = append(out, '[')
	spliced, ci := 0, 0
	for i, m := range items {
		if skip[i] {
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		if ci < len(cands) && cands[ci].pos == i {
			t := turns[ci]
			ci++
			if t != nil {
				if len(t.Prior) > 0 {
					out = append(out, t.Prior...)
					out = append(out, ',')
				}
				out = append(out, t.Assistant...)
				// The client's results that follow go with the server
				// calls' in the order of the calls (an upstream may pair
				// results with calls by position).
				j := i + 1
				for j < len(items) && items[j].Get("role").Str == "tool" {
					skip[j] = true
					j++
				}
				out = appendResults(out, t, items[i+1:j])
				spliced++
				continue
			}
		}
		out = append(out, m.Raw...)
	}
	out = append(out, ']')
	if spliced == 0 {
		return req
	}
	body, err := sjson.SetRawBytes(req.Body, "messages", out)
	if err != nil {
		return req
	}
	metricState.WithLabelValues("spliced").Add(float64(spliced))
	r := req.Clone()
	r.Body = body
	r.Messages.Rewrite() // the hidden turns' messages sit among the client's
	return r
}

// appendResults appends the tool messages of turn t, its server calls'
// and the client's (client, as sent after the turn's assistant message),
// each after a comma, in the order of the turn's calls (a second answer
// to one call right after the first); a message that answers none of
// them goes after them, in the order it came.
func appendResults(out []byte, t *HiddenTurn, client []gjson.Result) []byte {
	rank := map[string]int{}
	gjson.GetBytes(t.Assistant, "tool_calls").ForEach(func(_, c gjson.Result) bool {
		if id := c.Get("id").String(); id != "" {
			if _, seen := rank[id]; !seen {
				rank[id] = len(rank)
			}
		}
		return true
	})
	type result struct {
		raw  []byte
		rank int
	}
	rs := make([]result, 0, len(t.ToolResults)+len(client))
	add := func(raw []byte) {
		r, ok := rank[gjson.GetBytes(raw, "tool_call_id").String()]
		if !ok {
			r = len(rank)
		}
		rs = append(rs, result{raw, r})
	}
	for _, r := range t.ToolResults {
		add(r)
	}
	for _, m := range client {
		add([]byte(m.Raw))
	}
	slices.SortStableFunc(rs, func(a, b result) int { return a.rank - b.rank })
	for _, r := range rs {
		out = append(out, ',')
		out = append(out, r.raw...)
	}
	return out
}

// carried reports whether the client's messages of the turn before its
// assistant message (after the client's last own input: a user message,
// or a tool result of one of its calls) already hold every server call of
// the turn's earlier rounds (prior: messages, comma separated), counted
// by tool name: a Responses client that replays the mcp_call items with
// their output. Names suffice: a chat client's history holds no server
// tool's name (a client tool may not take one), and the arguments the
// client was shown may differ from the kept ones (a guardrail redacts
// them). A replayed call's tool result is named by its mcp item's id.
func carried(before []gjson.Result, prior []byte) bool {
	if len(prior) == 0 {
		return false
	}
	sent := map[string]int{}
	for i := len(before) - 1; i >= 0; i-- {
		m := before[i]
		role := m.Get("role").Str
		if role == "user" || role == "tool" && !strings.HasPrefix(m.Get("tool_call_id").Str, "mcp_") {
			break
		}
		m.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
			sent[c.Get("function.name").Str]++
			return true
		})
	}
	if len(sent) == 0 {
		return false
	}
	all := true
	gjson.ParseBytes(append(append([]byte{'['}, prior...), ']')).ForEach(func(_, m gjson.Result) bool {
		m.Get("tool_calls").ForEach(func(_, c gjson.Result) bool {
			name := c.Get("function.name").Str
			if sent[name] == 0 {
				all = false
			}
			sent[name]--
			return all
		})
		return all
	})
	return all
}

// sameIDs reports whether a and b hold the same ids (order ignored; the
// lists are a handful of calls).
func sameIDs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		found := false
		for _, y := range b {
			if x == y {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
