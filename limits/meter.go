package limits

import (
	"bytes"
	"context"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/jsonedit"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// Meter wraps the upstream handler, innermost on every model's call layer,
// so that it sees each upstream attempt of every request: loop rounds,
// retries, fallbacks, and the calls tools make on the tenant's behalf. When
// the call ends it prices the upstream's usage (or our input estimate when
// the upstream reports none), adds it to the token counters of the matching
// limits (less the estimate the request layer already took), to the
// matching budgets' spend and to the usage record. Recording is queued, not
// on the request's path.
func (l *Limiter) Meter(next pipeline.Handler) pipeline.Handler {
	// The work before and after next.Chat is in functions of their own, so
	// that their locals are not on the stack while next runs.
	return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		// The call may go with a copy of r that asks for usage; the meter
		// keeps r itself, which the layers above hold anyway: a stream
		// holds no second request and body while it lasts.
		call, strip := askUsage(r)
		live := ctx.Err() == nil // an attempt begun after the client left reaches no provider
		resp, err := next.Chat(ctx, call)
		if err != nil {
			if live && ctx.Err() != nil {
				// The client left (or the gateway shut down) with the call
				// under way: the provider had the request and may bill it,
				// as it would a stream the client left. Its input is
				// estimated, as an abandoned stream's is.
				l.charge(ctx, r, tokens{}, false)
			}
			return resp, err
		}
		l.metered(ctx, r, resp, strip)
		return resp, nil
	})
}

// askUsage asks the upstream for a stream's usage when the client did not:
// its output tokens must count. strip says the usage chunk is to be taken
// out again on the way back.
//
//go:noinline
func askUsage(r *pipeline.Request) (_ *pipeline.Request, strip bool) {
	if r.Stream && !r.IncludeUsage && !gjson.GetBytes(r.Body, "stream_options.include_usage").Bool() {
		if b, err := sjson.SetBytes(r.Body, "stream_options.include_usage", true); err == nil {
			r = r.Clone()
			r.Body, strip = b, true
		}
	}
	return r, strip
}

// metered charges a non-streamed answer, or wraps a stream in the meter
// that charges it at its end.
//
//go:noinline
func (l *Limiter) metered(ctx context.Context, r *pipeline.Request, resp *pipeline.Response, strip bool) {
	if resp.Stream == nil {
		c, ok := resp.ChatUsage()
		if ok {
			r.Usage.Note(c)
			l.charge(ctx, r, tokensOf(c), true)
			return
		}
		// No usage came: the input is estimated, and so is the output,
		// from the answer's choices, as a stream's without usage is
		// counted from its chunks: an upstream that reports no usage
		// must not answer for free.
		l.charge(ctx, r, tokens{input: estimateAtEnd(r), output: estimateAnswer(resp.Body)}, true)
		return
	}
	resp.Stream = &meteredStream{Stream: resp.Stream, l: l, ctx: ctx, r: r, strip: strip}
}

// estimateAnswer estimates the output tokens of a JSON answer: a token per
// four bytes of what its choices' messages say (content, refusal,
// reasoning, tool calls' names and arguments), as a body is estimated
// without a tokenizer; logprobs and other members are no output.
func estimateAnswer(body []byte) int64 {
	n := 0
	gjson.GetBytes(body, "choices.#.message").ForEach(func(_, m gjson.Result) bool {
		for _, k := range []string{"content", "refusal", "reasoning_content", "reasoning"} {
			if v := m.Get(k); v.Type == gjson.String {
				n += len(v.Str)
			}
		}
		m.Get("tool_calls.#.function").ForEach(func(_, f gjson.Result) bool {
			n += len(f.Get("name").Str) + len(f.Get("arguments").Str)
			return true
		})
		return true
	})
	return int64((n + 3) / 4)
}

// tokensOf is the part of a usage the meter prices.
func tokensOf(c wire.ChatUsage) tokens {
	return tokens{input: c.Prompt, output: c.Completion, cached: c.Cached}
}

// UnconfiguredModel is the model name under which calls of models the
// config does not name are metered.
const UnconfiguredModel = "(unconfigured)"

// charge records one finished upstream call.
func (l *Limiter) charge(ctx context.Context, r *pipeline.Request, t tokens, ok bool) {
	l.chargeAs(ctx, r, t, ok, "")
}

// chargeAs is charge with the call metered under label in the metrics and
// the usage record ("": the model that answered).
func (l *Limiter) chargeAs(ctx context.Context, r *pipeline.Request, t tokens, ok bool, label string) {
	l.chargeIn(ctx, r, t, ok, label, "")
}

// chargeIn is chargeAs with the tokens added to the counters of scoped's
// scope ("": the model that answered; anyModel for a call that named none,
// HoldUnnamed).
func (l *Limiter) chargeIn(ctx context.Context, r *pipeline.Request, t tokens, ok bool, label, scoped string) {
	if !ok {
		t = tokens{input: estimateAtEnd(r)}
	}
	// Every charge comes here (a chat call's, a stream's, a tool loop
	// round's, a pass-through's): the one place the upstream's counts are
	// made sane before they reach the counters, the spend and the record.
	t = t.sane()
	tenant, key := who(r)
	model := r.Model
	now := l.now()
	price, _ := l.price(model)
	if tg := r.TargetOrDefault(); tg != nil && tg.Model != "" {
		model = tg.Model // the model that answered (after a fallback) is the one paid
		price, _ = l.price(tg.Model)
	}
	micro := cost(price, t)
	if label == "" {
		label = model
	}
	l.counters(tenant, label).add(t, micro)

	// The counters of the model that answered: a fallback's tokens count
	// against its own model's rules. The request's estimate was taken from
	// r.Model's, and comes off a call of that model only.
	if scoped == "" {
		scoped = r.Model
		if tg := r.TargetOrDefault(); tg != nil && tg.Model != "" {
			scoped = tg.Model
		}
	}
	sc := l.scopeOf(tenant, key, scoped, now)
	adds := newAdditions()
	used := t.input + t.output - stateFrom(ctx).takeEstimate(scoped)
	if used > 0 {
		for _, i := range sc.tokens {
			c := &sc.checks[i]
			adds.add(addition{key: c.key, kind: kindRate, limit: c.limit, n: used})
		}
	}
	if micro > 0 {
		for _, s := range sc.spend {
			adds.add(addition{key: s.key, kind: kindBudget, n: micro, until: s.end})
		}
	}
	field := sc.usage
	if label != scoped {
		field = usageField(tenant, key, label)
	}
	day, until := l.day(now)
	row := usageRow{mCalls: 1, mInput: t.input, mOutput: t.output, mCached: t.cached, mCost: micro}
	adds.add(addition{key: day, kind: kindUsage, field: field, row: row, until: until})
	l.record(now, adds)
}

// additions is a buffer of the additions of one record call, pooled:
// record consumes them before it returns (a memory store applies them, the
// recorder copies them).
type additions struct{ a []addition }

var additionsPool = sync.Pool{New: func() any { return &additions{a: make([]addition, 0, 8)} }}

func newAdditions() *additions { return additionsPool.Get().(*additions) }

func (b *additions) add(a addition) { b.a = append(b.a, a) }

// record applies the additions made at now, at once to a memory store (a
// map update), queued for a batched write to any other; then it frees b.
func (l *Limiter) record(now time.Time, b *additions) {
	switch {
	case len(b.a) == 0:
	case l.sync:
		_ = l.store.Add(context.Background(), now, b.a)
	default:
		l.rec.add(b.a)
		l.rec.soon()
	}
	clear(b.a)
	b.a = b.a[:0]
	additionsPool.Put(b)
}

// day returns the usage key of now's UTC day and when it expires.
func (l *Limiter) day(now time.Time) (string, time.Time) {
	d := l.dayOf(now)
	return d.key, d.until
}

// dayOf returns the day keys of now, built once per UTC day.
func (l *Limiter) dayOf(now time.Time) *dayKey {
	n := now.Unix() / 86400
	if k := l.today.Load(); k != nil && k.day == n {
		return k
	}
	u := now.UTC()
	k := &dayKey{day: n, key: l.prefix + "usage:" + u.Format("20060102"), until: now.Add(usageTTL),
		ymd: u.Format("20060102"), ym: u.Format("200601"),
		dayEnd:   time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC),
		monthEnd: time.Date(u.Year(), u.Month()+1, 1, 0, 0, 0, 0, time.UTC)}
	l.today.Store(k)
	return k
}

// usageField is the hash-field prefix of a tenant, key and model; the
// metric name follows. \x1f cannot occur in configured names.
func usageField(tenant, key, model string) string {
	return tenant + "\x1f" + key + "\x1f" + model + "\x1f"
}

// meteredStream watches a stream's usage chunks and charges the call once,
// when it ends (EOF, error or Close).
type meteredStream struct {
	pipeline.Stream
	l   *Limiter
	ctx context.Context
	r   *pipeline.Request
	// mu guards usage, seen and charged: Close, which charges too, may
	// come from another goroutine while Next reads.
	mu      sync.Mutex
	usage   wire.ChatUsage // the last usage chunk's, when seen
	seen    bool
	charged bool
	strip   bool // the client did not ask for usage: take it out
	// tail is the usage-only chunk still to send before the end, for a
	// client that asked for usage from an upstream that put it on chunks
	// with content; ended says it was sent and the end comes next.
	tail     []byte
	ended    bool
	complete atomic.Bool // the stream came to its end (io.EOF)
	content  atomic.Bool // a chunk with content was passed on (wire.ChunkHasContent)
	buf      *[]byte     // from chunkBufs: the last chunk without its usage member, until the next Next
	// chunks counts the chunks without usage passed on: what a stream that
	// ends without usage (cut, or a client that left before its usage
	// chunk) is charged for its output.
	chunks atomic.Int64
}

// chunkBufs holds the buffers of dropUsageMember's copies between chunks:
// a stream waiting for its next event holds none.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// release gives the last chunk's buffer back: its caller is done with it
// once it asks for the next chunk.
func (s *meteredStream) release() {
	if s.buf != nil {
		if cap(*s.buf) <= 64<<10 {
			chunkBufs.Put(s.buf)
		}
		s.buf = nil
	}
}

func (s *meteredStream) Next() ([]byte, error) {
	s.release()
	if s.ended {
		return nil, io.EOF
	}
	for {
		chunk, err := s.Stream.Next()
		if err == nil {
			var skip bool
			if chunk, skip = s.observe(chunk); skip {
				continue
			}
		}
		if err == io.EOF {
			s.complete.Store(true)
			s.end()
			if s.tail != nil {
				s.ended = true
				return s.tail, nil
			}
		}
		return chunk, err
	}
}

// observe keeps chunk's usage and, when the client did not ask for usage,
// takes it out: skip for a usage-only chunk. A function of its own, so that
// its locals are not on the stack while Next waits for the upstream.
//
//go:noinline
func (s *meteredStream) observe(chunk []byte) (out []byte, skip bool) {
	// A view of chunk: the counts are numbers, not its bytes.
	u := wire.ChunkUsage(chunk)
	c, ok := wire.ParseChatUsage(u)
	if !ok && u.IsObject() && s.strip && !hasChoice(jsonedit.Root(chunk)) {
		// A usage-only chunk whose counts are no counts: asked for on the
		// client's behalf, it goes; it is not kept (the call is estimated).
		return nil, true
	}
	if !ok {
		// No usage, or one whose counts are no counts on a chunk with
		// content: the chunk counts as content (the estimate's output).
		s.chunks.Add(1)
		if !s.content.Load() && wire.ChunkHasContent(chunk) {
			s.content.Store(true) // read until the first content: usually a chunk or two
		}
		if s.strip {
			// Asked for on the client's behalf, the upstream puts
			// "usage": null on every chunk; a client that did not ask
			// gets none (OpenAI sends the field only to those who ask).
			chunk = s.dropUsageMember(chunk)
		}
		return chunk, false
	}
	s.mu.Lock()
	s.usage, s.seen = c, true
	s.mu.Unlock()
	root := jsonedit.Root(chunk)
	if !hasChoice(root) {
		if s.strip {
			return nil, true // not asked for: the usage-only chunk goes
		}
		s.tail = nil // the upstream's own usage chunk, as OpenAI sends it
		return chunk, false
	}
	if !s.strip {
		// Asked for, but on a chunk with content (some servers send a
		// running total on every chunk): SDKs add up every usage they get,
		// so it goes once, in a chunk of its own at the end, as OpenAI
		// sends it, with the last total.
		s.tail = usageChunk(s.tail[:0], root)
	}
	// Off the chunk with content: every top-level usage, in one copy (a
	// chunk may repeat the key; sjson deletes the first).
	if edits, ok := jsonedit.DeleteMembers(nil, chunk, root, "usage"); ok && len(edits) > 0 {
		if b, ok := jsonedit.Apply(chunk, edits); ok {
			chunk = b
		}
	}
	return chunk, false
}

// hasChoice reports whether the choices of a chunk (its root) hold an
// element.
func hasChoice(root gjson.Result) bool {
	ch := root.Get("choices")
	if !ch.IsArray() { // ForEach visits a null or a scalar once
		return false
	}
	has := false
	ch.ForEach(func(_, _ gjson.Result) bool { has = true; return false })
	return has
}

// usageChunk appends to dst the usage-only chunk of root, a chunk with
// content and a usage: its id, created and model, no choices, its usage.
func usageChunk(dst []byte, root gjson.Result) []byte {
	dst = append(dst, '{')
	for _, k := range usageChunkKeys {
		if v := root.Get(k); v.Exists() && (k != "usage" || v.IsObject()) {
			dst = append(append(append(append(dst, '"'), k...), `":`...), v.Raw...)
			dst = append(dst, ',')
		}
		if k == "model" {
			dst = append(dst, `"choices":[],`...)
		}
	}
	return append(dst[:len(dst)-1], '}')
}

// usageChunkKeys are the members a usage-only chunk copies, in order.
var usageChunkKeys = [...]string{"id", "object", "created", "model", "system_fingerprint", "usage"}

// nullUsageTail is how a chunk ends whose last member is "usage": null:
// the quote before usage is not escaped, so the member is the top-level
// object's, not a string's bytes.
var nullUsageTail = []byte(`,"usage":null}`)

// dropUsageMember returns chunk without its top-level usage members: a
// copy in a pooled buffer when "usage": null ends it (the usual case; chunk
// itself is the upstream's, never written), else a new slice. A chunk that is not
// valid JSON, or has none, is returned as it is.
func (s *meteredStream) dropUsageMember(chunk []byte) []byte {
	if bytes.HasSuffix(chunk, nullUsageTail) {
		if s.buf == nil {
			s.buf = chunkBufs.Get().(*[]byte)
		}
		b := append(append((*s.buf)[:0], chunk[:len(chunk)-len(nullUsageTail)]...), '}')
		*s.buf = b
		chunk = b
	}
	if !bytes.Contains(chunk, usageKey) || !jsonvalid.Bytes(chunk) {
		return chunk // no other usage member (the common case: one scan)
	}
	if edits, ok := jsonedit.DeleteMembers(nil, chunk, jsonedit.Root(chunk), "usage"); ok && len(edits) > 0 {
		if b, ok := jsonedit.Apply(chunk, edits); ok {
			return b
		}
	}
	return chunk
}

var usageKey = []byte(`"usage"`)

func (s *meteredStream) Close() {
	s.Stream.Close()
	s.end()
	// s.buf is left to the collector: Close may come from another
	// goroutine while a chunk is read.
}

// end charges the call once, whichever of Next (at the stream's end) and
// Close comes first.
func (s *meteredStream) end() {
	s.mu.Lock()
	if s.charged {
		s.mu.Unlock()
		return
	}
	s.charged = true
	usage, seen := s.usage, s.seen
	s.mu.Unlock()
	if seen {
		// Noted for the layers outside and the access log, which do not
		// see the usage chunk when strip took it out.
		s.r.Usage.Note(usage)
		s.l.charge(s.ctx, s.r, tokensOf(usage), true)
		return
	}
	if !s.complete.Load() && !s.content.Load() {
		if s.ctx.Err() != nil {
			// Left by its client before any content (a reasoning model
			// sends its head early): the provider had the request, and the
			// input is estimated, as a JSON call's whose client left.
			s.l.charge(s.ctx, s.r, tokens{}, false)
			return
		}
		// Failed before any content: charged nothing, as the same
		// failure of a JSON answer is. A fallback's failed attempt does
		// not add to what the answer costs.
		return
	}
	// No usage came: the input is estimated, and the output counted as
	// about a token per chunk after the role's, as OpenAI streams them. A
	// client that reads an answer and leaves before its usage chunk still
	// pays for what it read.
	s.l.charge(s.ctx, s.r, tokens{input: estimateAtEnd(s.r), output: max(0, s.chunks.Load()-1)}, true)
}

// countRequest counts one client request of sc in the usage record.
func (l *Limiter) countRequest(now time.Time, sc *scope) {
	day, until := l.day(now)
	adds := newAdditions()
	adds.add(addition{key: day, kind: kindUsage, field: sc.usage, row: usageRow{mRequests: 1}, until: until})
	l.record(now, adds)
}
