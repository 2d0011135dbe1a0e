package limits

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/pipeline"
)

// usageTTL is how long daily usage records are kept.
const usageTTL = 400 * 24 * time.Hour

// Options configures New.
type Options struct {
	Config *config.Config
	Store  Store  // nil = memory
	Prefix string // key prefix (the Redis prefix)
	Logger zerolog.Logger
	Now    func() time.Time // nil = time.Now
}

// Limiter applies one config's [[limits]] and [[budgets]] and records usage
// and spend. Built once per config; safe for concurrent use. Close flushes
// what is still queued.
type Limiter struct {
	rules      []rule
	modelRules bool // a rule names a model: AdmitFallback needs the request's state
	budgets    []budgetRule
	prices     map[string]config.Price // client-facing model → price
	store      Store
	failClosed bool
	prefix     string
	log        zerolog.Logger
	now        func() time.Time
	rec        *recorder
	sync       bool // the store is memory: record without the queue
	lastWarn   atomic.Int64
	metersMu   sync.RWMutex
	meters     map[meterKey]*meterCounters
	today      atomic.Pointer[dayKey]
	scopes     sync.Map // scopeKey → *scope
	nScopes    atomic.Int64
	slotPfx    string // names of concurrency slots (slotName): random, so replicas sharing a store never meet
	slotSeq    atomic.Uint64
}

// dayKey is what the keys of one UTC day need, built once a day.
type dayKey struct {
	day              int64     // days since the epoch
	key              string    // the usage record's key
	until            time.Time // when a record written today expires
	ymd, ym          string    // 20261123, 202611
	dayEnd, monthEnd time.Time
}

// rule is one [[limits]] entry with its patterns.
type rule struct {
	index              int
	tenant, key, model string // "" = shared across that dimension
	rpm, tpm, conc     int64
	tools              int64
	// The store keys of its counters, up to the scope: prefix, kind, index.
	keyR, keyT, keyC, keyX string
}

// budgetRule is one [[budgets]] entry.
type budgetRule struct {
	index       int
	tenant, key string
	micro       int64 // amount in micro-dollars
	period      string
	warnAt      float64
}

// New builds the limiter of cfg.
func New(o Options) *Limiter {
	cfg := o.Config
	l := &Limiter{
		store:      o.Store,
		failClosed: cfg.Middleware.Limits.Fail == "closed",
		prefix:     o.Prefix,
		log:        o.Logger,
		now:        o.Now,
		prices:     map[string]config.Price{},
		meters:     map[meterKey]*meterCounters{},
	}
	if l.store == nil {
		l.store = NewMemoryStore()
	}
	_, l.sync = l.store.(*memoryStore)
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // never fails (crypto/rand)
	l.slotPfx = hex.EncodeToString(rnd[:]) + "-"
	if l.now == nil {
		l.now = time.Now
	}
	for _, u := range cfg.UnknownCallers() {
		l.log.Warn().Str("key", u[0]).Str("name", u[1]).Msg("limits: a rule names a tenant or key that no [[keys]] entry has; it applies to nobody")
	}
	seen := map[string]int{}
	for i, r := range cfg.Limits {
		// A counter's key names its rule by what the rule selects, not by
		// its place in the file: a reload that adds, removes or reorders
		// rules keeps the others' counters (and a rolling deploy's
		// replicas share them). The requests in flight are counted whatever
		// the cap, so a changed concurrent keeps them. A per-minute
		// counter's state is a time that means something only at its
		// rate, so its key names the rate too: a changed rate starts
		// a fresh minute.
		id := ruleID(r)
		// Rules selecting the same calls with the same kind of limit keep
		// a counter each, numbered in their order among those alone: a
		// rule of another kind put between them changes nothing.
		nth := func(kind string, limit int64) string {
			if limit <= 0 {
				return ""
			}
			n := seen[kind+id]
			seen[kind+id]++
			if n == 0 {
				return ""
			}
			return "#" + strconv.Itoa(n)
		}
		key := func(kind string, limit int64, rate bool) string {
			k := o.Prefix + "rl:" + kind + ":" + id + nth(kind, limit)
			if rate {
				k += "/" + strconv.FormatInt(limit, 10)
			}
			return k + ":"
		}
		l.rules = append(l.rules, rule{index: i, tenant: r.Tenant, key: r.Key, model: r.Model,
			rpm: r.RequestsPerMinute, tpm: r.TokensPerMinute, conc: r.Concurrent, tools: r.ToolCallsPerMinute,
			keyR: key("r", r.RequestsPerMinute, true), keyT: key("t", r.TokensPerMinute, true),
			keyC: key("c", r.Concurrent, false), keyX: key("x", r.ToolCallsPerMinute, true)})
	}
	// Budgets match tenants and keys, never models: only a rule naming a
	// model can apply to a fallback and not to the model asked for.
	l.modelRules = slices.ContainsFunc(cfg.Limits, func(r config.Limit) bool { return r.Model != "" })
	for i, b := range cfg.Budgets {
		l.budgets = append(l.budgets, budgetRule{index: i, tenant: b.Tenant, key: b.Key,
			micro: int64(math.Round(b.Amount * 1e6)), period: b.Period, warnAt: b.WarnAt})
	}
	for _, m := range cfg.Models {
		up := m.Upstream
		if up == "" && len(m.Deployments) > 0 {
			up = m.Deployments[0].Upstream
		}
		if up == "" {
			up = m.Name
		}
		l.prices[m.Name], _ = priceFor(m.Price, up)
	}
	if slices.ContainsFunc(cfg.Limits, func(r config.Limit) bool { return r.TokensPerMinute > 0 }) {
		// A token rule counts every request's input before its call: the
		// tokenizers are built now, in the background, rather than by the
		// first request of each (half a second it would wait).
		contextedit.BuildCounter("") // a request without a route
		for _, m := range cfg.Models {
			contextedit.BuildCounter(m.Encoding)
		}
	}
	// The recorder's sequence key is this limiter's own, as its slot names are.
	l.rec = newRecorder(l.store, o.Logger, o.Prefix+"rec:"+l.slotPfx)
	return l
}

// ruleID names a [[limits]] rule by what it selects: a digest of its
// tenant, key and model patterns (any bytes, kept out of the store key).
func ruleID(r config.Limit) string {
	sum := sha256.Sum256([]byte(r.Tenant + "\x00" + r.Key + "\x00" + r.Model))
	return hex.EncodeToString(sum[:8])
}

// Close flushes queued usage and stops the recorder.
func (l *Limiter) Close() { l.rec.close() }

// Flush writes queued usage and spend now.
func (l *Limiter) Flush() { l.rec.flush() }

// matches reports whether pattern admits v: "" and "*" admit everything.
func matches(pattern, v string) bool {
	if pattern == "" || pattern == "*" {
		return true
	}
	ok, _ := path.Match(pattern, v)
	return ok
}

// anyModel is the model of a call of a model whose body names none (a
// pass-through body the upstream answers with its default model,
// HoldUnnamed). NUL is in no model's name a provider serves, and a
// client that names one holding it is refused (namedModel).
const anyModel = "\x00"

// namedModel refuses a model name holding a NUL: a client could otherwise
// name anyModel ("\u0000" in JSON, a raw byte in a form field) and be
// counted as a call that names none, which a budget refuses only when the
// caller says so (HoldUnnamed): named, it would pass unpriced and cost
// nothing. No real model's name holds one.
func namedModel(model string) error {
	if strings.IndexByte(model, 0) >= 0 {
		return pipeline.BadRequest("model", "The model name must not contain a NUL character.")
	}
	return nil
}

// scope names a rule's counter after its kind prefix: each dimension the
// rule names (tenant, key, model), empty for the ones it shares. ok is
// false when the rule does not apply.
//
// A call of anyModel may be a call of any model: every rule of its tenant
// and key applies. It counts against the counter of a rule that names one
// model (model = "gpt-4o") as a call naming that model does; a rule of a
// pattern ("gpt-4o*", "*") keeps a counter per model it matches, and which
// of them is the upstream's default cannot be told, so the call counts
// against one of the rule's own (the model part empty), as one more model.
func (r *rule) scope(tenant, key, model string) (string, bool) {
	if !matches(r.tenant, tenant) || !matches(r.key, key) || (model != anyModel && !matches(r.model, model)) {
		return "", false
	}
	if r.tenant == "" {
		tenant = ""
	}
	if r.key == "" {
		key = ""
	}
	switch {
	case r.model == "":
		model = ""
	case model == anyModel && strings.ContainsAny(r.model, "*?[\\"):
		model = ""
	case model == anyModel:
		model = r.model
	}
	// The model is the last part: what follows the second separator, ':'
	// or not ("llama3:8b"), once the parts before it are escaped.
	return keyPart(tenant) + ":" + keyPart(key) + ":" + model, true
}

// keyPart is a name as one part of a counter's key, whose parts ':'
// separates: a ':' in it (and the '%' that escapes it) is escaped, so
// that tenant "t" with key "x:y" and tenant "t:x" with key "y" keep
// counters of their own. A name without either, the usual one, is used as
// it is (no allocation, and the counters of such names keep their keys;
// those of a name with either start anew once, at the upgrade).
func keyPart(name string) string {
	if !strings.ContainsAny(name, ":%") {
		return name
	}
	return keyEscaper.Replace(name)
}

var keyEscaper = strings.NewReplacer("%", "%25", ":", "%3A")

// who returns the tenant and key names of r.
func who(r *pipeline.Request) (tenant, key string) {
	if r.Tenant == nil {
		return "default", ""
	}
	return r.Tenant.Name, r.Tenant.Key
}

// periodKey names the spend counter of b in the period containing now, and
// when that period ends.
func (l *Limiter) periodKey(b *budgetRule, tenant, key string, now time.Time) (string, time.Time) {
	scope, who := "t:", keyPart(tenant)
	if b.key != "" {
		scope, who = "k:", keyPart(key)
	}
	d := l.dayOf(now)
	switch b.period {
	case "day":
		return l.prefix + "spend:" + scope + who + ":" + d.ymd, d.dayEnd
	case "month":
		return l.prefix + "spend:" + scope + who + ":" + d.ym, d.monthEnd
	default:
		return l.prefix + "spend:" + scope + who + ":total", time.Time{}
	}
}

func (b *budgetRule) applies(tenant, key string) bool {
	return (b.tenant != "" && b.tenant == tenant) || (b.key != "" && b.key == key)
}

// estimate counts the input tokens of a chat body with the route's
// tokenizer, or estimates those of any other JSON body (a pass-through
// endpoint's) from its text (Counter.CountJSON: every key and string as
// text, every number as one token, media counted as images or files; the
// tokenizing bounded to 64 KiB of text, the rest estimated from its bytes);
// 0 when it cannot, or for a body that is not a JSON object or array (a
// multipart form: audio, images), whose parts are media that their bytes
// tell nothing of in tokens.
func estimate(r *pipeline.Request) int64 {
	if noTokens(r) {
		return 0
	}
	c, err := contextedit.CounterFor(encodingOf(r))
	if err != nil {
		return 0
	}
	if r.Endpoint != "" && r.Endpoint != pipeline.ChatEndpoint {
		// Not a chat body, whatever it holds: a messages array in it is not
		// what the endpoint reads.
		return int64(c.CountJSON(r.Body))
	}
	n, err := c.Count(r.Body)
	if err != nil {
		return int64(c.CountJSON(r.Body))
	}
	return int64(n)
}

// noTokens reports whether r's body counts no input tokens: another
// endpoint's body that is not a JSON object or array (media), or a count
// that calls no model (pipeline.InputTokensEndpoint).
func noTokens(r *pipeline.Request) bool {
	other := r.Endpoint != "" && r.Endpoint != pipeline.ChatEndpoint
	return other && (!jsonCall(r.Body) || r.Endpoint == pipeline.InputTokensEndpoint)
}

// encodingOf is the tokenizer of r's route ("" without one: the default).
func encodingOf(r *pipeline.Request) string {
	if r.Route != nil {
		return r.Route.Encoding
	}
	return ""
}

// estimateAtEnd is estimate for a charge made at the end of an answer that
// reported no usage (a stream cut, or closed by its client or a shutdown,
// or an upstream that never reports usage). The answer's last bytes wait for
// the charge, and building a tokenizer takes about half a second (seconds on a
// loaded machine: long enough to outlast a shutdown's last writes). So when
// the route's tokenizer is not built yet, the input is estimated from the
// body's bytes (contextedit.EstimateJSON: text from its bytes, media as
// images and files), and the tokenizer is built in the background for the
// charges after it.
func estimateAtEnd(r *pipeline.Request) int64 {
	enc := encodingOf(r)
	switch {
	case counterBuilt(enc):
		return estimate(r)
	case noTokens(r):
		return 0
	}
	contextedit.BuildCounter(enc)
	return int64(contextedit.EstimateJSON(r.Body))
}

// counterBuilt is contextedit.CounterBuilt; tests replace it.
var counterBuilt = contextedit.CounterBuilt

// jsonCall reports whether body is a JSON object or array, as a JSON call's
// body is (the pass-through checked it is valid JSON): its first byte past
// any white space opens one.
func jsonCall(body []byte) bool {
	for _, b := range body {
		switch b {
		case ' ', '\t', '\n', '\r':
			continue
		case '{', '[':
			return true
		}
		return false
	}
	return false
}

// storeFailed handles a store error: fail open (allow, warn at most every
// 10 s, count) or closed (429).
func (l *Limiter) storeFailed(err error) error {
	storeErrors.Inc()
	now := l.now().UnixNano()
	if last := l.lastWarn.Load(); now-last > int64(10*time.Second) && l.lastWarn.CompareAndSwap(last, now) {
		l.log.Warn().Err(err).Bool("fail_closed", l.failClosed).Msg("limits: store unavailable")
	}
	if l.failClosed {
		return pipeline.RateLimited(pipeline.TypeRequests, time.Second, "Rate limits cannot be checked right now; retry shortly.")
	}
	return nil
}

// reqState is one client request's: its check's outcome, and what travels
// in the context from Middleware to Meter, the input estimate already taken
// from the first call's token counters.
type reqState struct {
	mu       sync.Mutex
	estimate int64
	model    string
	out      outcome            // Take's answer (a Store is an interface: a local would escape)
	counts   [8]int64           // out's counts of a scope's usual few (four) checks
	headers  [6]pipeline.Header // the x-ratelimit-* headers, lent to the request's Meta
	fellBack []string           // the fallbacks AdmitFallback admitted for the request: model asked for, NUL, fallback model
}

// fellBackTo reports whether a call of the request made that fallback
// before (AdmitFallback admitted it).
func (s *reqState) fellBackTo(fallback string) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.fellBack, fallback)
}

// noteFallback records that a call of the request made that fallback.
func (s *reqState) noteFallback(fallback string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !slices.Contains(s.fellBack, fallback) {
		s.fellBack = append(s.fellBack, fallback)
	}
}

type stateKey struct{}

// takeEstimate returns the estimate taken for model, once.
func (s *reqState) takeEstimate(model string) int64 {
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.model != model {
		return 0
	}
	e := s.estimate
	s.estimate = 0
	return e
}

// context helper kept tiny: one key, one type.
func stateFrom(ctx context.Context) *reqState {
	s, _ := ctx.Value(stateKey{}).(*reqState)
	return s
}
