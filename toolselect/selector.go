// Package toolselect is LLM tool selection ([middleware.tool_select]): when
// a request offers more tools than its model's max_tools, a cheap selector
// model is asked which of them fit the latest user turn, and only those, the
// always_include tools, the tools the history already calls and the tool
// tool_choice names are offered upstream, for every round of the request.
//
// The selector's call is made on the caller's behalf through the selector
// model's own model-call layer (fallback, metering, limits), and its answer
// is cached per (tools, latest user turn) in the response cache's store.
// Whatever goes wrong, the request goes on with every tool (fail open).
package toolselect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel/attribute"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/tracing"
	"github.com/llmgw/gateway/wire"
)

// HeaderSelected is the response header "kept/offered": how many tools the
// request was left with, of how many it offered.
const HeaderSelected = "x-gateway-tools-selected"

// selectionTTL is how long a selection is kept: a conversation's later
// requests with the same latest user turn (a client's own tool rounds) get
// the same tools, so the provider's cached prompt prefix survives.
const selectionTTL = time.Hour

// Store keeps selections. The response cache's stores satisfy it.
// Implementations are safe for concurrent use.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, bool, error)
	Set(ctx context.Context, key string, val []byte, ttl time.Duration) error
}

// Options configure a Selector; read once, by New.
type Options struct {
	Config *config.Config // [middleware.tool_select] and the models' tables
	// Lookup resolves the selector model's route.
	Lookup func(model string) *pipeline.Route
	// Admit applies the caller's policy and limits to the selector's call
	// before it is made; an error refuses it (every tool is offered). nil
	// admits every call.
	Admit func(r *pipeline.Request) error
	Store Store // nil = selections are not cached
	Log   zerolog.Logger
}

// settings are one model's resolved tool selection settings.
type settings struct {
	model              string
	maxTools, minTools int
	always             map[string]bool
}

// Selector picks the tools of requests. Built once by New; safe for
// concurrent use.
type Selector struct {
	models map[string]*settings // by client-facing model name; absent = off
	lookup func(string) *pipeline.Route
	admit  func(*pipeline.Request) error
	store  Store
	log    zerolog.Logger
	counts counts // of recent tools arrays, for Needed
}

// Tool is a server tool of the request, as the selector sees it.
type Tool struct {
	Name, Description string
}

// Result is what Select did, for the loop's trace.
type Result struct {
	Outcome        string // one of the Outcome constants
	Offered, Kept  int    // tools the request offered, and offers after selection
	Prompt, Answer int64  // the selector call's usage (tokens); never the client's
}

// New returns a Selector, or nil when no model selects tools.
func New(o Options) *Selector {
	s := &Selector{models: map[string]*settings{}, lookup: o.Lookup, admit: o.Admit, store: o.Store, log: o.Log}
	for i := range o.Config.Models {
		m := &o.Config.Models[i]
		ts, on := o.Config.ToolSelectFor(m)
		if !on {
			continue
		}
		st := &settings{model: ts.Model, maxTools: ts.MaxTools, minTools: ts.MinTools, always: map[string]bool{}}
		for _, n := range ts.AlwaysInclude {
			st.always[n] = true
		}
		s.models[m.Name] = st
	}
	if len(s.models) == 0 {
		return nil
	}
	return s
}

// Needed reports whether req, which brings server server tools along, offers
// more tools than its model's max_tools. It reads the client's tools from
// req.Tools (ingress's), so its cost does not grow with the conversation,
// and allocates nothing once it has seen the array: it is the whole cost of
// a configured selection that does not trigger.
func (s *Selector) Needed(req *pipeline.Request, server int) bool {
	st := s.models[req.Model]
	if st == nil {
		return false
	}
	return server+s.counts.count(req.Tools) > st.maxTools
}

// Select picks the tools of req, for which Needed reported true. It returns
// the request to serve (req, or a clone whose body offers only the kept
// client tools), the server tools to keep (nil = all of them), and what it
// did. It sets the x-gateway-tools-selected header. It never fails the
// request: on any failure every tool stays offered.
func (s *Selector) Select(ctx context.Context, req *pipeline.Request, server []Tool) (*pipeline.Request, map[string]bool, Result) {
	st := s.models[req.Model]
	o := parseOffer(req.Body)
	cands := make([]candidate, 0, len(o.client)+len(server))
	for _, t := range o.client {
		if t.name != "" {
			cands = append(cands, candidate{t.name, t.description})
		}
	}
	for _, t := range server {
		cands = append(cands, candidate{t.Name, t.Description})
	}
	res := Result{Offered: len(o.client) + len(server)}
	res.Kept = res.Offered
	if st == nil || o.none || res.Offered <= st.maxTools {
		// tool_choice none calls no tool; Needed's estimate was high.
		return req, nil, res
	}
	picks := s.pick(ctx, req, st, o, cands, &res)
	defer s.report(ctx, req, st, &res)
	if picks == nil {
		return req, nil, res
	}
	keep := make(map[string]bool, len(picks)+len(st.always)+len(o.pinned))
	for _, n := range picks {
		keep[n] = true
	}
	for n := range st.always {
		keep[n] = true
	}
	for n := range o.pinned {
		keep[n] = true
	}
	client, kept := 0, 0
	for _, t := range o.client {
		if t.name == "" || keep[t.name] {
			client++
		}
	}
	for _, t := range server {
		if keep[t.Name] {
			kept++
		}
	}
	if client == len(o.client) {
		res.Kept = client + kept
		return req, keep, res
	}
	body, tools, err := withClientTools(req.Body, o, keep)
	if err != nil {
		res.Outcome = OutcomeMalformed // the body could not be edited: offer everything
		return req, nil, res
	}
	res.Kept = client + kept
	r := req.Clone()
	r.Body, r.Tools = body, tools
	return r, keep, res
}

// pick returns the selector's valid picks, from the store or from the
// selector model; nil when every tool is to be offered (res.Outcome says
// why).
func (s *Selector) pick(ctx context.Context, req *pipeline.Request, st *settings, o *offer, cands []candidate, res *Result) []string {
	if o.text == "" {
		res.Outcome = OutcomeSkipped
		return nil
	}
	key := s.key(req, st, o, cands)
	if s.store != nil {
		if v, ok, err := s.store.Get(ctx, key); err == nil && ok {
			if names, ok := parseAnswer(string(v)); ok {
				if picks := validNames(names, cands, st.maxTools); len(picks) >= st.minTools {
					res.Outcome = OutcomeCached
					return picks
				}
			}
		}
	}
	content, err := s.call(ctx, req, st, cands, o.text, res)
	if err != nil {
		var pe *pipeline.Error
		res.Outcome = OutcomeError
		if errors.Is(err, errRefused) || errors.As(err, &pe) && pe.Code == pipeline.CodeMaxModelCalls {
			res.Outcome = OutcomeRefused
		}
		s.log.Warn().Err(err).Str("request_id", req.ID).Str("selector", st.model).Str("outcome", res.Outcome).
			Msg("tool selection failed; every tool is offered")
		return nil
	}
	names, ok := parseAnswer(content)
	picks := validNames(names, cands, st.maxTools)
	if !ok || len(picks) < st.minTools {
		res.Outcome = OutcomeMalformed
		s.log.Warn().Str("request_id", req.ID).Str("selector", st.model).Int("valid_names", len(picks)).
			Msg("tool selection answer unusable; every tool is offered")
		return nil
	}
	res.Outcome = OutcomeSelected
	if s.store != nil {
		_ = s.store.Set(context.WithoutCancel(ctx), key, appendNames(nil, picks), selectionTTL)
	}
	return picks
}

// errRefused wraps the caller's policy refusing the selector's call.
var errRefused = errors.New("toolselect: the selector call was refused by the caller's policy")

// call asks the selector model on the caller's behalf and returns its
// answer's text.
func (s *Selector) call(ctx context.Context, req *pipeline.Request, st *settings, cands []candidate, text string, res *Result) (string, error) {
	var route *pipeline.Route
	if s.lookup != nil {
		route = s.lookup(st.model)
	}
	if route == nil || route.ModelLayer == nil {
		return "", errors.New("toolselect: the selector model has no route")
	}
	r := &pipeline.Request{ID: req.ID, Start: req.Start, Body: requestBody(st.model, cands, text, st.minTools, st.maxTools),
		Model: st.model, Route: route, Tenant: req.Tenant, TraceID: req.TraceID,
		Meta: &pipeline.Meta{}} // its own headers: never the client's
	if s.admit != nil {
		if err := s.admit(r); err != nil {
			return "", errors.Join(errRefused, err)
		}
	}
	// Its own model call, even under a fallback route's call.
	resp, err := route.ModelLayer.Chat(fallback.NewCall(ctx), r)
	if err != nil {
		return "", err
	}
	if resp.Stream != nil {
		resp.Stream.Close()
		return "", errors.New("toolselect: the selector answered with a stream")
	}
	if u, ok := wire.ParseChatUsage(gjson.GetBytes(resp.Body, "usage")); ok {
		res.Prompt, res.Answer = u.Prompt, u.Completion
	}
	return gjson.GetBytes(resp.Body, "choices.0.message.content").String(), nil
}

// key names the selection of these candidates for this turn, by this
// selector and these bounds, for this tenant.
func (s *Selector) key(req *pipeline.Request, st *settings, o *offer, cands []candidate) string {
	h := sha256.New()
	tenant := ""
	if req.Tenant != nil {
		tenant = req.Tenant.Name
	}
	for _, v := range []string{st.model, strconv.Itoa(st.minTools), strconv.Itoa(st.maxTools), tenant, o.text} {
		h.Write([]byte(v))
		h.Write([]byte{0})
	}
	for _, c := range cands {
		h.Write([]byte(c.name))
		h.Write([]byte{0})
		h.Write([]byte(c.description))
		h.Write([]byte{0})
	}
	return "toolselect:" + hex.EncodeToString(h.Sum(nil))
}

// report counts the selection, sets the header and adds a trace event with
// the selector's tokens.
func (s *Selector) report(ctx context.Context, req *pipeline.Request, st *settings, res *Result) {
	metricSelections.WithLabelValues(res.Outcome).Inc()
	sel := strconv.Itoa(res.Kept) + "/" + strconv.Itoa(res.Offered)
	req.Meta.Set(HeaderSelected, sel)
	tracing.Event(ctx, "gateway.tool_select",
		attribute.String("gateway.tool_select.outcome", res.Outcome),
		attribute.String("gateway.tool_select.selected", sel),
		attribute.String("gateway.tool_select.model", st.model),
		attribute.Int64("gen_ai.usage.input_tokens", res.Prompt),
		attribute.Int64("gen_ai.usage.output_tokens", res.Answer))
}
