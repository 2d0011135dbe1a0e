// Package fallback is the model-call middleware that makes one upstream call
// dependable: retries with exponential backoff and full jitter (honouring the
// upstream's retry-after up to a cap), weighted choice among a model's
// deployments, a circuit breaker per deployment, and a chain of fallback
// models (only larger context windows after a context-length error).
//
// Streams follow the same rules as whole responses: a stream that fails
// before its first content reached the client is retried or falls back
// transparently; after that, failures reach the client as errors.
package fallback

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/lazyctx"
	"github.com/llmgw/gateway/pipeline"
)

// Response headers set through Request.Meta.
const (
	HeaderModel    = "x-gateway-model"    // the client-facing model that answered
	HeaderAttempts = "x-gateway-attempts" // upstream attempts made for the client request
)

var (
	// ErrCircuitOpen is the cause inside the 503 returned when every
	// deployment that could serve the request has its circuit open.
	ErrCircuitOpen = errors.New("fallback: circuit open")
	// ErrDeadline is the cause inside the UpstreamTimeout returned when the
	// fallback deadline (config middleware.fallback.deadline) ran out.
	ErrDeadline = errors.New("fallback: deadline exceeded")
)

// Options configures New. The slices are read during New only. The config
// parts are used as given: config applies their defaults
// (config.ApplyDefaults) and validates them.
type Options struct {
	// Providers supplies Retries and RetryAfterCap per provider name; the
	// other fields are ignored. A deployment of a provider not listed gets
	// no retries.
	Providers []config.Provider
	// Models, when set, lets New build the breakers of every configured
	// deployment up front. Deployments not listed get one on first use.
	Models []config.Model
	// Fallback holds backoff, deadline and breaker settings.
	Fallback config.Fallback
	Logger   zerolog.Logger
	// Shared, when set, shares the breakers with other replicas; New starts
	// it and the caller closes it.
	Shared *SharedBreakers

	// Sleep waits d or until ctx ends (returning its error). Default: a timer.
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a number in [0, 1); it must be safe for concurrent use.
	// Default: math/rand/v2.Float64.
	Rand func() float64
	// Now is the clock of the breakers and of the deadline bookkeeping.
	// Default: time.Now.
	Now func() time.Time
	// Allows reports whether tenant may use model: a fallback model the
	// caller's policy refuses is skipped, as if it were not configured.
	// Default: every model.
	Allows func(tenant *pipeline.Tenant, model string) bool
	// Admit applies the caller's limits to a call of the fallback model
	// for r (the rules of model that r's own admission did not take), ctx
	// being the model call's; a model it refuses is skipped. Default:
	// every call.
	Admit func(ctx context.Context, r *pipeline.Request, model string) error
	// OnClose, when set, is given the func that releases what this New
	// holds beyond its own memory (the circuit-state series of its
	// breakers), for the caller to run when the middleware is done with
	// (its runtime closed after a reload).
	OnClose func(release func())
}

// handler is the middleware around one route's next handler. Safe for
// concurrent use; all mutable state lives in the shared tables.
type handler struct {
	next     pipeline.Handler
	t        *tables
	lookup   func(string) *pipeline.Route
	allows   func(*pipeline.Tenant, string) bool
	admit    func(context.Context, *pipeline.Request, string) error
	log      zerolog.Logger
	base     time.Duration
	max      time.Duration
	deadline time.Duration
	sleep    func(context.Context, time.Duration) error
	rand     func() float64
	now      func() time.Time
}

// New returns the fallback middleware. lookup resolves a fallback model name
// to its Route at request time (nil = unknown, skipped); it must be safe for
// concurrent use. The returned Middleware may wrap the model-call chains of
// many routes: they share one set of breakers, so a deployment used by
// several routes has one circuit. The Handlers it builds are safe for
// concurrent use; they never modify the Request they are given (each attempt
// gets a Clone) and set x-gateway-model and x-gateway-attempts on its Meta.
func New(opts Options, lookup func(model string) *pipeline.Route) pipeline.Middleware {
	f := opts.Fallback
	t := &tables{
		providers: make(map[string]providerPolicy, len(opts.Providers)),
		threshold: f.BreakerFailures,
		cooldown:  f.BreakerCooldown.D(),
		log:       opts.Logger,
		shared:    opts.Shared,
		breakers:  make(map[depKey]*breaker),
		routes:    make(map[*pipeline.Route]*routeState),
	}
	for _, p := range opts.Providers {
		pp := providerPolicy{retryAfterCap: p.RetryAfterCap.D()}
		if p.Retries != nil {
			pp.retries = *p.Retries
		}
		t.providers[p.Name] = pp
	}
	for _, m := range opts.Models {
		for _, d := range m.Deployments {
			t.breakerFor(d.Provider, d.Upstream)
		}
	}
	if opts.OnClose != nil {
		opts.OnClose(t.release)
	}
	proto := handler{
		t:        t,
		lookup:   lookup,
		allows:   opts.Allows,
		admit:    opts.Admit,
		log:      opts.Logger,
		base:     f.BaseBackoff.D(),
		max:      f.MaxBackoff.D(),
		deadline: f.Deadline.D(),
		sleep:    opts.Sleep,
		rand:     opts.Rand,
		now:      opts.Now,
	}
	if proto.sleep == nil {
		proto.sleep = sleepCtx
	}
	if proto.rand == nil {
		proto.rand = rand.Float64
	}
	if proto.now == nil {
		proto.now = time.Now
	}
	if proto.allows == nil {
		proto.allows = func(*pipeline.Tenant, string) bool { return true }
	}
	if proto.admit == nil {
		proto.admit = func(context.Context, *pipeline.Request, string) error { return nil }
	}
	if proto.lookup == nil {
		proto.lookup = func(string) *pipeline.Route { return nil }
	}
	if opts.Shared != nil {
		opts.Shared.start(func(ev breakerEvent) { t.applyRemote(ev, proto.now()) })
	}
	return func(next pipeline.Handler) pipeline.Handler {
		h := proto
		h.next = next
		return &h
	}
}

// callState is the bookkeeping of one model call, shared with the nested
// fallback middleware of the fallback routes through the context. It is
// used by one goroutine at a time (the nested call is synchronous).
type callState struct {
	deadline time.Time
	attempts int
	provider string // of the last attempt, for the deadline error
}

// nestedKey marks a context passed to a fallback route's ModelLayer: the
// fallback middleware there retries and picks deployments but does not walk
// a chain again.
type nestedKey struct{}

// Nested reports whether ctx is that of a fallback route's model call made
// by the fallback middleware of another route: part of the same model call,
// not a new one (toolloop's model-call limit counts it once).
func Nested(ctx context.Context) bool {
	st, _ := ctx.Value(nestedKey{}).(*callState)
	return st != nil
}

// NewCall returns ctx for a model call of its own made while another call
// is prepared (a summary written by context editing): under a fallback
// route's call it is not part of that call, so it walks its own model's
// fallbacks with its own deadline and counts as a model call.
func NewCall(ctx context.Context) context.Context {
	if !Nested(ctx) {
		return ctx
	}
	return context.WithValue(ctx, nestedKey{}, (*callState)(nil))
}

// Chat implements pipeline.Handler.
func (h *handler) Chat(ctx context.Context, req *pipeline.Request) (*pipeline.Response, error) {
	if req.Route == nil {
		return h.next.Chat(ctx, req)
	}
	if st, _ := ctx.Value(nestedKey{}).(*callState); st != nil {
		return h.tryRoute(ctx, st, req, req.Route)
	}

	st := &callState{deadline: h.now().Add(h.deadline)} // stays on the stack
	var dl *lazyctx.Ctx
	actx := ctx
	switch d, ok := ctx.Deadline(); {
	case ok && time.Until(d) <= h.deadline:
		st.deadline = h.now().Add(time.Until(d)) // the caller's deadline comes first
	default:
		// Not a context deadline: the upstream client would bound a whole
		// stream by it. It only cancels while nothing was returned, and
		// costs a cancel context and a timer only when something waits on
		// it (a stream does; a plain answer read at once does not).
		dl = lazyctx.New(ctx, time.Now().Add(h.deadline))
		actx = dl
	}

	resp, route, err := h.walk(actx, st, req)
	return h.settle(ctx, actx, st, req, resp, route, err, dl)
}

// settle ends a call that walk answered: it stops the deadline (closing an
// answer it fired on), hands a stream the cancel of its context, and sets
// the attempts and model headers. A function of its own, so that its
// locals are not on the stack while walk runs.
//
//go:noinline
func (h *handler) settle(ctx, actx context.Context, st *callState, req *pipeline.Request, resp *pipeline.Response, route *pipeline.Route, err error,
	dl *lazyctx.Ctx) (*pipeline.Response, error) {
	if dl != nil && !dl.Stop() && err == nil && resp.Stream != nil {
		// The deadline passed as the answer arrived: its stream is cut.
		resp.Stream.Close()
		resp, err = nil, actx.Err()
	}
	if err != nil && actx.Err() != nil {
		err = h.stopErr(ctx, st, err)
	}
	if dl != nil {
		if err == nil && resp.Stream != nil {
			rs, ok := resp.Stream.(*replayStream)
			if !ok {
				rs = &replayStream{up: resp.Stream}
				resp.Stream = rs
			}
			rs.onClose = dl.Cancel
		} else {
			dl.Cancel()
		}
	}

	attempts := st.attempts
	if prev := req.Meta.Get(HeaderAttempts); prev != "" { // earlier rounds of a tool loop
		if n, perr := strconv.Atoi(prev); perr == nil {
			attempts += n
		}
	}
	req.Meta.Set(HeaderAttempts, strconv.Itoa(attempts))
	if err != nil {
		return nil, err
	}
	req.Meta.Set(HeaderModel, route.Name)
	return resp, nil
}

// stopErr is the error for a call whose context ended: the client's own
// cancellation as it is, any deadline as an upstream timeout (504).
func (h *handler) stopErr(parent context.Context, st *callState, err error) error {
	if perr := parent.Err(); perr != nil && !errors.Is(perr, context.DeadlineExceeded) {
		if cause := context.Cause(parent); cause != nil {
			return cause
		}
		return perr
	}
	h.log.Warn().Int("attempts", st.attempts).AnErr("last", err).Msg("fallback deadline exceeded")
	return &pipeline.UpstreamError{Kind: pipeline.UpstreamTimeout, Provider: st.provider, Err: ErrDeadline}
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
