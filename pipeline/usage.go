package pipeline

import (
	"sync"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/wire"
)

// usageMemo is Body's top-level usage, found once, and its counts, read
// once. It names the body it was read from, so a layer that stores a new
// Body gets a fresh read.
type usageMemo struct {
	body   *byte
	n      int
	usage  gjson.Result
	parsed int8 // 0: counts not read yet; 1: read; -1: usage is not an object
	counts wire.ChatUsage
}

// Usage returns Body's top-level "usage" value (gjson.Result{} when there is
// none). The usage object sits at the end of a completion, so finding it
// scans the whole body; the meter, the prompt cache and the access log each
// need it, and the scan is done once per Body. The result's Raw is a view of
// Body: valid while Body is.
func (r *Response) Usage() gjson.Result {
	if len(r.Body) == 0 {
		r.usage = usageMemo{parsed: -1} // no body, no usage: forget an earlier body's
		return gjson.Result{}
	}
	p := unsafe.SliceData(r.Body)
	if r.usage.body != p || r.usage.n != len(r.Body) {
		r.usage = usageMemo{body: p, n: len(r.Body), usage: gjson.Get(unsafe.String(p, len(r.Body)), "usage")}
	}
	return r.usage.usage
}

// ChatUsage returns the token counts of Body's usage object, read once per
// Body; ok is false when there is none.
func (r *Response) ChatUsage() (c wire.ChatUsage, ok bool) {
	u := r.Usage()
	if r.usage.parsed == 0 {
		r.usage.parsed = -1
		if r.usage.counts, ok = wire.ParseChatUsage(u); ok {
			r.usage.parsed = 1
		}
	}
	return r.usage.counts, r.usage.parsed == 1
}

// UsageLog is where the meter, the one layer that reads the usage of every
// upstream call, notes each usage it read. The layers outside it and the
// access log find a stream's usage there even when the meter took it out
// of the stream (a client that did not ask for usage gets none, yet the
// call's tokens are still counted and logged). The proxy puts one on a
// streamed request; its clones share it, so a tool loop's rounds note into
// the same log (an agent tool's call, whose usage is not the client's
// answer's, does not). Safe for concurrent use; a nil log notes nothing.
type UsageLog struct {
	mu sync.Mutex
	at UsageMark
}

// UsageMark is where a log stands: the notes so far, those with a
// cache-write count, and their sum. Since sums what was noted after one.
type UsageMark struct {
	n, writes, reasonings int                              // notes; those with a cache-write count, a reasoning count
	extras                [len(wire.ChatUsage{}.Extra)]int // notes that had each detail of Extra
	total                 wire.ChatUsage
}

// Note adds the usage one upstream call reported.
func (l *UsageLog) Note(c wire.ChatUsage) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.at.n++
	if c.HasCacheWrite {
		l.at.writes++
	}
	if c.HasReasoning {
		l.at.reasonings++
	}
	for i, has := range c.HasExtra {
		if has {
			l.at.extras[i]++
		}
	}
	l.at.total.Add(c)
}

// Mark returns where the log stands now (before a call, for Since).
func (l *UsageLog) Mark() UsageMark {
	if l == nil {
		return UsageMark{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.at
}

// Since returns the sum of the usages noted after m (a layer's own call,
// with every upstream call made inside it: a re-ask, a fallback attempt);
// ok is false when none was.
func (l *UsageLog) Since(m UsageMark) (wire.ChatUsage, bool) {
	if l == nil {
		return wire.ChatUsage{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.at.total
	c := wire.ChatUsage{Prompt: t.Prompt - m.total.Prompt, Completion: t.Completion - m.total.Completion,
		Total: t.Total - m.total.Total, Cached: t.Cached - m.total.Cached, CacheWrite: t.CacheWrite - m.total.CacheWrite,
		HasCacheWrite: l.at.writes > m.writes, Reasoning: t.Reasoning - m.total.Reasoning, HasReasoning: l.at.reasonings > m.reasonings}
	for i := range c.Extra { // OpenAI's audio and prediction details, as the upstream reported them
		c.Extra[i], c.HasExtra[i] = t.Extra[i]-m.total.Extra[i], l.at.extras[i] > m.extras[i]
	}
	return c, l.at.n > m.n
}

// Total returns the sum of every usage noted; ok is false when none was.
func (l *UsageLog) Total() (wire.ChatUsage, bool) {
	return l.Since(UsageMark{})
}
