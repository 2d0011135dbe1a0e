package caching

import (
	"bytes"
	"context"
	"hash/fnv"
	"strconv"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonedit"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
)

// Prompt-cache modes of a provider (config.Provider.PromptCache).
const (
	PromptNone      = "none"      // strip cache_control markers
	PromptOpenAI    = "openai"    // strip markers, set prompt_cache_key
	PromptAnthropic = "anthropic" // inject cache_control breakpoints
)

// maxBreakpoints is Anthropic's limit of cache_control blocks per request.
const maxBreakpoints = 4

// PromptProvider is the prompt-cache setting of one provider.
type PromptProvider struct {
	Mode string // PromptNone, PromptOpenAI or PromptAnthropic; "" = none
	TTL  string // anthropic marker ttl ("5m", "1h"); "" = the provider default
}

// PromptOptions configure NewPromptCache.
type PromptOptions struct {
	// Providers maps a provider name (pipeline.Target.Provider) to its
	// setting; a provider not listed is PromptNone. Read-only after start.
	Providers map[string]PromptProvider
	Logger    zerolog.Logger
}

// PromptProviders builds PromptOptions.Providers from the config.
func PromptProviders(ps []config.Provider) map[string]PromptProvider {
	m := make(map[string]PromptProvider, len(ps))
	for _, p := range ps {
		m[p.Name] = PromptProvider{Mode: p.PromptCache, TTL: p.PromptCacheTTL}
	}
	return m
}

var cacheControlKey = []byte(`"cache_control"`)

// NewPromptCache returns the model-call middleware that adds provider
// prompt-caching hints to each upstream call, chosen by the provider of
// r.TargetOrDefault():
//
//   - anthropic: cache_control {"type":"ephemeral"[,"ttl"]} on up to 4
//     breakpoints, in prefix order: the last tool, the last system/developer
//     message, the last message of the transcript (it moves forward every
//     round of the tool loop). Client markers are kept, count toward the 4,
//     and a breakpoint that already carries one is left alone.
//   - openai: cache_control markers stripped; prompt_cache_key set to
//     "<tenant>-<hash of tools and system prefix>" when the client sent none.
//   - none: cache_control markers stripped.
//
// An edited body is a new slice on a clone of r; a request that needs no
// edit passes through untouched. It also counts prompt, cached and
// cache-write tokens per provider and upstream model from the response
// usage (body or stream chunks, observed without buffering). Safe for
// concurrent use.
func NewPromptCache(opts PromptOptions) pipeline.Middleware {
	markers := make(map[string][]byte, len(opts.Providers))
	for name, p := range opts.Providers {
		if p.Mode == PromptAnthropic {
			m := []byte(`{"type":"ephemeral"}`)
			if p.TTL != "" {
				m, _ = sjson.SetBytes(m, "ttl", p.TTL)
			}
			markers[name] = m
		}
	}
	return func(next pipeline.Handler) pipeline.Handler {
		// The work before and after next.Chat is in functions of their
		// own, so that their locals are not on the stack while next runs.
		return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			r, provider, model := promptEdit(&opts, markers, r)
			from := r.Usage.Mark() // a layer inside may read the stream to its end before Chat returns
			resp, err := next.Chat(ctx, r)
			if err != nil || resp == nil {
				return resp, err
			}
			observeResponse(r.Usage, from, resp, provider, model)
			return resp, nil
		})
	}
}

// promptEdit applies the target provider's prompt-cache mode to r and
// returns the provider and upstream model its usage is counted under.
//
//go:noinline
func promptEdit(opts *PromptOptions, markers map[string][]byte, r *pipeline.Request) (_ *pipeline.Request, provider, model string) {
	provider, model = "", r.Model
	if t := r.TargetOrDefault(); t != nil {
		provider, model = t.Provider, t.Upstream
	}
	var body []byte
	switch opts.Providers[provider].Mode {
	case PromptAnthropic:
		body = addBreakpoints(r.Body, markers[provider])
	case PromptOpenAI:
		body = setPromptCacheKey(stripMarkers(r.Body), r)
	default:
		body = stripMarkers(r.Body)
	}
	if !sameSlice(body, r.Body) {
		r = r.Clone()
		r.Body = body
	}
	return r, provider, model
}

// observeResponse counts a non-streamed answer's usage, or wraps a stream
// in the counter of its usage.
//
//go:noinline
func observeResponse(log *pipeline.UsageLog, from pipeline.UsageMark, resp *pipeline.Response, provider, model string) {
	if resp.Stream != nil {
		resp.Stream = &usageStream{inner: resp.Stream, log: log, from: from, provider: provider, model: model}
	} else if c, ok := resp.ChatUsage(); ok {
		countUsage(provider, model, c)
	}
}

// sameSlice reports whether a and b are the same bytes in memory (an edit
// always returns a new slice).
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// markState says what a breakpoint position holds.
type markState int

const (
	unmarkable markState = iota // no content a marker can go on
	marked                      // the client already put a marker there
	markable
)

type edit struct {
	path string
	raw  []byte
}

// addBreakpoints returns body with Anthropic cache_control breakpoints, or
// body itself when there is nothing to add.
func addBreakpoints(body, marker []byte) []byte {
	res := gjson.GetManyBytes(body, "tools", "messages", "cache_control")
	tools, msgs := res[0], res[1]
	free := maxBreakpoints
	if bytes.Contains(body, cacheControlKey) {
		free -= countMarkers(tools, msgs)
		if res[2].Exists() {
			free--
		}
	}
	var edits []edit
	if ts := tools.Array(); len(ts) > 0 && free > 0 {
		if !ts[len(ts)-1].Get("cache_control").Exists() {
			edits = append(edits, edit{"tools." + strconv.Itoa(len(ts)-1) + ".cache_control", marker})
			free--
		}
	}
	ms := msgs.Array()
	// The system breakpoint goes on the last of the system messages the
	// conversation starts with: the prefix every conversation of the app
	// shares (Anthropic's system prompt). A system message from the middle
	// of one conversation is no such prefix.
	sys := -1
	for i, m := range ms {
		if role := m.Get("role").String(); role != "system" && role != "developer" {
			break
		}
		sys = i
	}
	if sys >= 0 && free > 0 {
		if st, e := markMessage(sys, ms[sys], marker); st == markable {
			edits = append(edits, e)
			free--
		}
	}
	for i := len(ms) - 1; i > sys && free > 0; i-- {
		st, e := markMessage(i, ms[i], marker)
		if st == markable {
			edits = append(edits, e)
			free--
		}
		if st != unmarkable {
			break
		}
	}
	for _, e := range edits {
		if out, err := sjson.SetRawBytes(body, e.path, e.raw); err == nil {
			body = out
		}
	}
	return body
}

// markMessage says whether message i can take a marker and, if so, the edit:
// string content becomes one text part carrying the marker; for list content
// the last part gets it.
func markMessage(i int, m gjson.Result, marker []byte) (markState, edit) {
	if m.Get("cache_control").Exists() {
		return marked, edit{}
	}
	c := m.Get("content")
	switch {
	case c.Type == gjson.String && c.Str != "":
		raw := make([]byte, 0, len(c.Raw)+len(marker)+48)
		raw = append(raw, `[{"type":"text","text":`...)
		raw = append(raw, c.Raw...)
		raw = append(raw, `,"cache_control":`...)
		raw = append(raw, marker...)
		raw = append(raw, "}]"...)
		return markable, edit{"messages." + strconv.Itoa(i) + ".content", raw}
	case c.IsArray():
		parts := c.Array()
		if len(parts) == 0 {
			return unmarkable, edit{}
		}
		last := parts[len(parts)-1]
		if last.Get("cache_control").Exists() {
			return marked, edit{}
		}
		if !last.IsObject() {
			return unmarkable, edit{}
		}
		return markable, edit{"messages." + strconv.Itoa(i) + ".content." + strconv.Itoa(len(parts)-1) + ".cache_control", marker}
	}
	return unmarkable, edit{}
}

// markerPaths lists the path of every cache_control marker in tools and
// messages (tool, tool function, message, content part).
func markerPaths(tools, msgs gjson.Result) []string {
	var paths []string
	i := 0
	tools.ForEach(func(_, t gjson.Result) bool {
		if t.Get("cache_control").Exists() {
			paths = append(paths, "tools."+strconv.Itoa(i)+".cache_control")
		}
		if t.Get("function.cache_control").Exists() {
			paths = append(paths, "tools."+strconv.Itoa(i)+".function.cache_control")
		}
		i++
		return true
	})
	i = 0
	msgs.ForEach(func(_, m gjson.Result) bool {
		if m.Get("cache_control").Exists() {
			paths = append(paths, "messages."+strconv.Itoa(i)+".cache_control")
		}
		j := 0
		m.Get("content").ForEach(func(_, p gjson.Result) bool {
			if p.IsObject() && p.Get("cache_control").Exists() {
				paths = append(paths, "messages."+strconv.Itoa(i)+".content."+strconv.Itoa(j)+".cache_control")
			}
			j++
			return true
		})
		i++
		return true
	})
	return paths
}

func countMarkers(tools, msgs gjson.Result) int { return len(markerPaths(tools, msgs)) }

// stripMarkers returns body without any cache_control marker (OpenAI rejects
// them), or body itself when it has none. The markers are cut in one copy
// of the body (jsonedit), whatever their number: deleting them one by one
// copied the body per marker, minutes of CPU for a body of a few hundred
// kilobytes of marked parts.
func stripMarkers(body []byte) []byte {
	if !bytes.Contains(body, cacheControlKey) {
		return body
	}
	root := jsonedit.Root(body)
	if !root.IsObject() {
		return body
	}
	edits, ok := jsonedit.DeleteMembers(nil, body, root, "cache_control")
	cut := func(obj gjson.Result) bool {
		if ok && strings.Contains(obj.Raw, `"cache_control"`) {
			edits, ok = jsonedit.DeleteMembers(edits, body, obj, "cache_control")
		}
		return ok
	}
	root.Get("tools").ForEach(func(_, t gjson.Result) bool {
		return cut(t) && cut(t.Get("function"))
	})
	root.Get("messages").ForEach(func(_, m gjson.Result) bool {
		if !cut(m) {
			return false
		}
		if c := m.Get("content"); c.IsArray() {
			c.ForEach(func(_, p gjson.Result) bool { return cut(p) })
		}
		return ok
	})
	if !ok || len(edits) == 0 {
		return body // positions unknown (never seen): the upstream refuses the markers
	}
	out, ok := jsonedit.Apply(body, edits)
	if !ok {
		return body
	}
	return out
}

// maxKeyTenant is the most of a tenant's name a prompt_cache_key shows.
const maxKeyTenant = 40

// setPromptCacheKey sets prompt_cache_key to "<tenant>-<16 hex>" (a hash of
// the tools and the leading system/developer messages, the stable prefix,
// and of a tenant name cut to maxKeyTenant bytes) unless the client sent
// one.
func setPromptCacheKey(body []byte, r *pipeline.Request) []byte {
	res := gjson.GetManyBytes(body, "prompt_cache_key", "tools", "messages")
	if res[0].Type == gjson.String && res[0].Str != "" {
		return body
	}
	h := fnv.New64a()
	tenant := "gw"
	if r.Tenant != nil && r.Tenant.Name != "" {
		tenant = r.Tenant.Name
	}
	if len(tenant) > maxKeyTenant {
		// Cut (at a character's start) for the key's length: the whole
		// name goes into the hash, so that tenants whose names share
		// their first bytes do not share a key.
		h.Write([]byte(tenant))
		h.Write([]byte{0})
		n := maxKeyTenant
		for n > 0 && !utf8.RuneStart(tenant[n]) {
			n--
		}
		tenant = tenant[:n]
	}
	h.Write([]byte(res[1].Raw))
	res[2].ForEach(func(_, m gjson.Result) bool {
		if role := m.Get("role").String(); role != "system" && role != "developer" {
			return false
		}
		h.Write([]byte(m.Raw))
		return true
	})
	var sum [8]byte
	key := tenant + "-" + hexString(h.Sum(sum[:0]))
	out, err := sjson.SetBytes(body, "prompt_cache_key", key)
	if err != nil {
		return body
	}
	return out
}

func hexString(b []byte) string {
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = hexDigits[c>>4], hexDigits[c&0xf]
	}
	return string(out)
}

// usageStream passes chunks through unchanged and, when the stream ends,
// counts the prompt-cache tokens of the usage the meter noted for this call
// and the upstream calls inside it, a re-ask or another attempt
// (pipeline.UsageLog): the usage chunk itself may have been taken out
// before it got here (a client that did not ask for usage). A stream whose
// request has no log is not counted. Used by one goroutine at a time, but
// for Close; Close closes inner.
type usageStream struct {
	inner           pipeline.Stream
	log             *pipeline.UsageLog
	from            pipeline.UsageMark // the log before the call
	counted         atomic.Bool
	provider, model string
}

// Next returns inner's next chunk unchanged.
func (s *usageStream) Next() ([]byte, error) {
	chunk, err := s.inner.Next()
	if err != nil {
		s.count() // the meter noted the usage as the stream ended
	}
	return chunk, err
}

// Close closes inner, and counts the usage of a stream closed before its
// end (the meter notes it on Close).
func (s *usageStream) Close() {
	s.inner.Close()
	s.count()
}

// count counts the call's usage once, if the meter noted one.
func (s *usageStream) count() {
	if c, ok := s.log.Since(s.from); ok && s.counted.CompareAndSwap(false, true) {
		countUsage(s.provider, s.model, c)
	}
}

// countUsage counts one call's prompt, cached and cache-write tokens.
func countUsage(provider, model string, c wire.ChatUsage) {
	if c.Prompt > 0 {
		promptTokensOf.Get(tokenKey{provider, model, "prompt"}).Add(float64(c.Prompt))
	}
	if c.Cached > 0 {
		promptTokensOf.Get(tokenKey{provider, model, "cached"}).Add(float64(c.Cached))
	}
	if c.CacheWrite > 0 {
		promptTokensOf.Get(tokenKey{provider, model, "cache_write"}).Add(float64(c.CacheWrite))
	}
}
