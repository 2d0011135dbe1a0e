package caching

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"golang.org/x/sync/singleflight"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/pipeline"
)

// HeaderCache is the response header that reports the cache decision:
// "hit" (served without an upstream call of its own), "miss" (looked up, not
// found, the model answered) or "bypass" (not looked up: the request is not
// cacheable, the client sent no-cache, or the store is unavailable).
const HeaderCache = "x-gateway-cache"

// maxHintTTL caps the client's ttl=N hint.
const maxHintTTL = 24 * time.Hour

// Options configure NewResponseCache.
type Options struct {
	// Config is used as given (config applies its defaults). Config.Enabled
	// applies to a request whose tenant's policy does not override it
	// (pipeline.Tenant.CachesResponses).
	Config config.Cache
	// ServerTools reports that server tools are configured: entries are
	// then never shared across tenants, whatever SharedAcross says.
	ServerTools bool
	Store       Store

	// ToolSetVersion identifies the server tool set (a hash the integrator
	// computes); answers produced with another tool set never match.
	ToolSetVersion string

	Logger zerolog.Logger
	Now    func() time.Time // default time.Now
}

// hints are the parsed x-gateway-cache request header.
type hints struct {
	noCache, noStore bool
	ttl              time.Duration
}

// parseHints reads a comma-separated list of no-cache, no-store and ttl=N
// (seconds). Unknown or malformed tokens are ignored; ttl=0 means no-store.
func parseHints(s string) hints {
	var h hints
	for s != "" {
		var tok string
		tok, s, _ = strings.Cut(s, ",")
		tok = strings.ToLower(strings.TrimSpace(tok))
		switch {
		case tok == "no-cache":
			h.noCache = true
		case tok == "no-store":
			h.noStore = true
		case strings.HasPrefix(tok, "ttl="):
			n, err := strconv.ParseInt(tok[4:], 10, 64)
			var ttl time.Duration
			switch {
			case err != nil || n < 0:
			case n == 0:
				h.noStore = true
			case n >= int64(maxHintTTL/time.Second): // cap before multiplying: no overflow
				ttl = maxHintTTL
			default:
				ttl = time.Duration(n) * time.Second
			}
			if ttl > 0 && (h.ttl == 0 || ttl < h.ttl) {
				h.ttl = ttl // of several, the shortest: a hint only shortens
			}
		}
	}
	return h
}

// cacheable reports whether the answer to body is deterministic enough to
// reuse: temperature 0 (absent means the provider default, 1: not cacheable)
// unless always; never n > 1, logprobs or audio output, which a replay cannot
// reproduce.
func cacheable(r *pipeline.Request, always bool) bool {
	temperature, n := r.Field(pipeline.FieldTemperature), r.Field(pipeline.FieldN)
	logprobs, modalities := r.Field(pipeline.FieldLogprobs), r.Field(pipeline.FieldModalities)
	if !always && (temperature.Type != gjson.Number || temperature.Float() != 0) {
		return false
	}
	if n.Exists() && n.Type != gjson.Null && n.Int() != 1 {
		return false
	}
	if logprobs.Type == gjson.True {
		return false
	}
	audio := false
	modalities.ForEach(func(_, m gjson.Result) bool {
		audio = m.String() == "audio"
		return !audio
	})
	return !audio
}

// responseCache is the middleware's state, shared by all requests.
type responseCache struct {
	next   pipeline.Handler
	opts   Options
	flight singleflight.Group
	errs   *errorLog
}

// flightResult is what the leader of a single flight shares: the completion
// when it was a storable final answer (a private copy), or the error.
type flightResult struct {
	completion []byte
	resp       *pipeline.Response // the leader's own response
	model      string             // a fallback's answer: the model that gave it (fallback.HeaderModel)
}

// NewResponseCache returns the response-cache middleware of the request
// layer. It runs after the policies middleware (r.Tenant is set). A hit is
// served without calling next: JSON for a JSON request, a replayed chunk
// stream for a stream request, whatever form the entry was produced in. A
// stream miss is passed through chunk by chunk while a copy is assembled on
// the side and stored at a clean end. An answer a fallback model gave is
// never stored (servedByFallback). Concurrent identical non-stream misses
// make one upstream call (single flight); identical concurrent streams each
// go upstream, so no stream waits a whole generation for its first byte.
// Store failures fail open (bypass). The returned middleware is safe for
// concurrent use.
func NewResponseCache(opts Options) pipeline.Middleware {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return func(next pipeline.Handler) pipeline.Handler {
		if opts.Store == nil {
			return next
		}
		return &responseCache{next: next, opts: opts, errs: newErrorLog(opts.Logger)}
	}
}

// Chat serves r from the cache or from next.
func (c *responseCache) Chat(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
	if !r.Tenant.CachesResponses(c.opts.Config.Enabled) {
		return c.next.Chat(ctx, r)
	}
	if !cacheable(r, c.opts.Config.Always) {
		resultBypass.Inc()
		r.Meta.Set(HeaderCache, "bypass")
		return c.next.Chat(ctx, r)
	}
	h := parseHints(r.Hints.Cache)
	// Answers may hold results of server tools a tenant is allowed and
	// another is not: share entries across tenants only without server tools.
	key := requestKey(r, c.opts.ToolSetVersion, c.opts.Config.SharedAcross && !c.opts.ServerTools)

	if h.noCache {
		resultBypass.Inc()
		r.Meta.Set(HeaderCache, "bypass")
		return c.fill(ctx, r, key, h)
	}
	val, ok, err := c.opts.Store.Get(ctx, key)
	if err != nil {
		// Fail open: answer without the cache, and do not try to store
		// into a store that just failed.
		storeErrors.WithLabelValues("response", "get").Inc()
		c.errs.report("get", err)
		resultBypass.Inc()
		r.Meta.Set(HeaderCache, "bypass")
		return c.next.Chat(ctx, r)
	}
	if ok {
		// An entry without usage (its upstream reported none) answers
		// only a stream that did not ask for usage. A JSON client or a
		// stream with include_usage would get no usage or zeros, so for
		// them it is a miss, and a refill may store one with usage. (A
		// stream whose client did not ask records its calls' usage all
		// the same: recordingStream.)
		if completion, fresh := decodeEntry(val, c.opts.Now(), c.opts.Config.TTL.D()); fresh &&
			(r.Stream && !r.IncludeUsage || hasUsage(completion)) {
			resultHit.Inc()
			r.Meta.Set(HeaderCache, "hit")
			return c.serve(r, completion), nil
		}
	}
	if r.Stream {
		resultMiss.Inc()
		r.Meta.Set(HeaderCache, "miss")
		return c.fill(ctx, r, key, h)
	}
	return c.coalesce(ctx, r, key, h)
}

// hasUsage reports whether a cached completion carries a usage object.
func hasUsage(completion []byte) bool {
	return gjson.GetBytes(completion, "usage").IsObject()
}

// serve answers r from a cached completion in the form r asked for.
func (c *responseCache) serve(r *pipeline.Request, completion []byte) *pipeline.Response {
	id, created := newCompletionID(), c.opts.Now().Unix()
	if r.Stream {
		s := newReplayStream(completion, id, created, r.Model, r.IncludeUsage, r.OnServerCall)
		r.Lookahead.Set(s)
		return &pipeline.Response{Stream: s}
	}
	if r.OnServerCall != nil {
		for _, sc := range storedCalls(completion) {
			sc.tell(r.OnServerCall)
		}
	}
	return &pipeline.Response{Body: renderJSON(completion, id, created, r.Model)}
}

// fill calls next and stores a storable answer unless no-store.
func (c *responseCache) fill(ctx context.Context, r *pipeline.Request, key string, h hints) (*pipeline.Response, error) {
	calls := c.listen(r, h)
	resp, err := c.next.Chat(ctx, r)
	if err != nil || h.noStore || resp == nil || servedByFallback(r) {
		return resp, err
	}
	if resp.Stream != nil {
		ctx := context.WithoutCancel(ctx)
		rs := &recordingStream{inner: resp.Stream, calls: r.Usage}
		rs.done = func(completion []byte) {
			// A tool loop's later round may have fallen back since
			// next returned (its first round only had answered then).
			if servedByFallback(r) {
				return
			}
			c.store(ctx, key, calls.add(completion), h)
		}
		if calls != nil {
			calls.rec = &rs.rec
		}
		resp.Stream = rs
		if _, local := c.opts.Store.(*MemoryStore); !local {
			// The stream's end stores the answer over the network: its
			// last events leave before that (a memory store's Set waits
			// on nothing).
			r.Lookahead.EndWaits()
		}
		return resp, nil
	}
	c.store(ctx, key, calls.add(resp.Body), h)
	return resp, nil
}

// servedByFallback reports whether one of the fallback models of r's model
// answered r, not r's own (fallback.HeaderModel names the model that
// answered). Such an answer is the client's, but it is neither stored nor
// shared with the followers of a single flight: it stands in for an
// answer the model could not give then, and stored under the model's key
// it would answer every identical request for the whole TTL, long after
// the model is back.
//
// A tool loop's later rounds report the model that answered them with
// Meta.NoteAnswered (the request's own header describes its first call):
// a fallback in any round counts.
func servedByFallback(r *pipeline.Request) bool {
	own := r.Model
	if r.Route != nil {
		own = r.Route.Name
	}
	if answered := r.Meta.Get(fallback.HeaderModel); answered != "" && answered != own {
		return true
	}
	for _, answered := range r.Meta.Answered() {
		if answered != own {
			return true
		}
	}
	return false
}

// listen returns the log of the server calls r's miss runs, for the answer
// it stores; nil when it stores none, or when no server tool is configured.
func (c *responseCache) listen(r *pipeline.Request, h hints) *callLog {
	if !c.opts.ServerTools || h.noStore {
		return nil
	}
	return listen(r)
}

// store writes completion (not retained) when it is a storable final answer
// and reports whether it was storable.
func (c *responseCache) store(ctx context.Context, key string, completion []byte, h hints) bool {
	if !storable(completion, c.opts.Config.ToolCalls) {
		return false
	}
	ttl := c.opts.Config.TTL.D()
	if h.ttl > 0 && h.ttl < ttl {
		// A client may keep its answers for less than the operator chose,
		// never for longer: the store is the operator's, shared by tenants.
		ttl = h.ttl
	}
	if err := c.opts.Store.Set(ctx, key, encodeEntry(completion, c.opts.Now().Add(ttl)), ttl); err != nil {
		storeErrors.WithLabelValues("response", "set").Inc()
		c.errs.report("set", err)
		return true
	}
	responseStores.Inc()
	return true
}

// coalesce makes one upstream call for concurrent identical non-stream
// misses. The leader's answer is its own; followers get a fresh rendering of
// the shared completion when it was storable (a fallback's answer too,
// which is not stored), and otherwise call next themselves (a non-final
// answer is not shared). A leader that failed because its own client left
// does not fail the followers: they start a new flight, which the first of
// them leads and the others join (up to maxLeads times; then each calls).
func (c *responseCache) coalesce(ctx context.Context, r *pipeline.Request, key string, h hints) (*pipeline.Response, error) {
	for range maxLeads {
		resp, err := c.flight1(ctx, r, key, h)
		if err != errLeaderGone {
			return resp, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	resultMiss.Inc()
	r.Meta.Set(HeaderCache, "miss")
	return c.fill(ctx, r, key, h)
}

// maxLeads bounds the flights a follower joins when their leaders' clients
// keep leaving.
const maxLeads = 3

// errLeaderGone is flight1's report that the leader of the flight a
// follower joined failed because its own client left.
var errLeaderGone = errors.New("caching: the flight's leader left")

// flight1 runs or joins one flight of coalesce.
func (c *responseCache) flight1(ctx context.Context, r *pipeline.Request, key string, h hints) (*pipeline.Response, error) {
	// Do, not DoChan: the leader runs the call in its own goroutine (no
	// hand-off on every miss); a follower waits at most as long as the
	// leader's request, which the upstream timeouts bound.
	leader := false
	val, err, _ := c.flight.Do(key, func() (any, error) {
		leader = true
		calls := c.listen(r, hints{})
		resp, err := c.next.Chat(ctx, r)
		if err != nil || resp == nil || resp.Stream != nil {
			return flightResult{resp: resp}, err
		}
		fr := flightResult{resp: resp}
		byFallback := servedByFallback(r)
		if byFallback {
			// Not stored, but given to the followers waiting for it: run
			// again, each would first wait for the primary that just
			// failed, then get the same fallback's answer.
			if fr.model = r.Meta.Get(fallback.HeaderModel); fr.model == "" {
				return fr, nil // a later round's model (a tool loop): each follower calls next
			}
		}
		if completion := calls.add(resp.Body); storable(completion, c.opts.Config.ToolCalls) {
			fr.completion = append([]byte(nil), completion...)
			if !byFallback && !h.noStore {
				c.store(ctx, key, fr.completion, h)
			}
		}
		return fr, nil
	})
	res := singleflight.Result{Val: val, Err: err}
	if leader { // set before the result was sent: no race
		resultMiss.Inc()
		r.Meta.Set(HeaderCache, "miss")
		fr, _ := res.Val.(flightResult)
		return fr.resp, res.Err
	}
	fr, _ := res.Val.(flightResult)
	if res.Err == nil && fr.completion != nil {
		resultCoalesced.Inc()
		r.Meta.Set(HeaderCache, "hit")
		if fr.model != "" {
			r.Meta.Set(fallback.HeaderModel, fr.model) // a fallback's answer says so, as the leader's
		}
		return c.serve(r, fr.completion), nil
	}
	if res.Err != nil {
		if errors.Is(res.Err, context.Canceled) || errors.Is(res.Err, context.DeadlineExceeded) || errors.Is(res.Err, pipeline.ErrClientGone) {
			return nil, errLeaderGone
		}
		resultMiss.Inc()
		r.Meta.Set(HeaderCache, "miss")
		return nil, res.Err
	}
	resultMiss.Inc()
	r.Meta.Set(HeaderCache, "miss")
	return c.fill(ctx, r, key, h)
}
