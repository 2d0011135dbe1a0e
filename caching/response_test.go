package caching

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/fallback"
	"github.com/llmgw/gateway/pipeline"
)

const (
	det            = `{"model":"demo","temperature":0,"messages":[{"role":"user","content":"Hi"}]}`
	detStream      = `{"model":"demo","temperature":0,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`
	detStreamUsage = `{"model":"demo","temperature":0,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"Hi"}]}`
	detTools       = `{"model":"demo","temperature":0,"messages":[{"role":"user","content":"Weather?"}],"tools":[{"type":"function","function":{"name":"lookup"}}]}`
)

// step is one request of a scenario and what it must see.
type step struct {
	body    string
	hint    string
	advance time.Duration // clock advance before the request
	header  string        // x-gateway-cache, "" = none
	calls   int64         // upstream calls so far, after the request
}

func TestResponseCacheDecisions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		up   struct {
			finish, content string
			tools           []string
		} // the upstream's answer
		mutate func(*Options)
		policy pipeline.TenantPolicy // the tenant's; nil = none
		steps  []step
	}{
		{name: "miss then hit", steps: []step{
			{body: det, header: "miss", calls: 1},
			{body: det, header: "hit", calls: 1},
		}},
		{name: "temperature absent is the provider default: bypass", steps: []step{
			{body: `{"messages":[{"role":"user","content":"Hi"}]}`, header: "bypass", calls: 1},
			{body: `{"messages":[{"role":"user","content":"Hi"}]}`, header: "bypass", calls: 2},
		}},
		{name: "temperature 0.7 cached with always", mutate: func(o *Options) { o.Config.Always = true }, steps: []step{
			{body: `{"temperature":0.7,"messages":[]}`, header: "miss", calls: 1},
			{body: `{"temperature":0.7,"messages":[]}`, header: "hit", calls: 1},
		}},
		{name: "n > 1 and logprobs bypass", mutate: func(o *Options) { o.Config.Always = true }, steps: []step{
			{body: `{"n":2,"messages":[]}`, header: "bypass", calls: 1},
			{body: `{"logprobs":true,"messages":[]}`, header: "bypass", calls: 2},
		}},
		{name: "no-cache skips the lookup but stores", steps: []step{
			{body: det, hint: "no-cache", header: "bypass", calls: 1},
			{body: det, hint: "no-cache", header: "bypass", calls: 2},
			{body: det, header: "hit", calls: 2},
		}},
		{name: "no-store looks up but never stores", steps: []step{
			{body: det, hint: "no-store", header: "miss", calls: 1},
			{body: det, header: "miss", calls: 2},
			{body: det, hint: "no-store", header: "hit", calls: 2},
		}},
		{name: "ttl=N overrides the configured ttl", steps: []step{
			{body: det, hint: "ttl=5", header: "miss", calls: 1},
			{body: det, advance: 4 * time.Second, header: "hit", calls: 1},
			{body: det, advance: 2 * time.Second, header: "miss", calls: 2},
		}},
		{name: "ttl=N never keeps an answer past the configured ttl", steps: []step{
			{body: det, hint: "ttl=3600", header: "miss", calls: 1},
			{body: det, advance: 59 * time.Second, header: "hit", calls: 1},
			{body: det, advance: 2 * time.Second, header: "miss", calls: 2},
		}},
		{name: "configured ttl expires on the injected clock", steps: []step{
			{body: det, header: "miss", calls: 1},
			{body: det, advance: 59 * time.Second, header: "hit", calls: 1},
			{body: det, advance: 2 * time.Second, header: "miss", calls: 2},
			{body: det, header: "hit", calls: 2},
		}},
		{name: "client tool-call turns not stored by default", up: answer("", "", `lookup:{"city":"Oslo"}`), steps: []step{
			{body: detTools, header: "miss", calls: 1},
			{body: detTools, header: "miss", calls: 2},
		}},
		{name: "client tool-call turns stored with tool_calls", up: answer("", "", `lookup:{"city":"Oslo"}`),
			mutate: func(o *Options) { o.Config.ToolCalls = true }, steps: []step{
				{body: detTools, header: "miss", calls: 1},
				{body: detTools, header: "hit", calls: 1},
			}},
		{name: "length is a final answer", up: answer("length", ""), steps: []step{
			{body: det, header: "miss", calls: 1},
			{body: det, header: "hit", calls: 1},
		}},
		{name: "content_filter is not stored", up: answer("content_filter", ""), steps: []step{
			{body: det, header: "miss", calls: 1},
			{body: det, header: "miss", calls: 2},
		}},
		{name: "empty content is not stored", up: answer("", "-"), steps: []step{
			{body: det, header: "miss", calls: 1},
			{body: det, header: "miss", calls: 2},
		}},
		{name: "an entry without usage answers only streams that did not ask for it", steps: []step{
			{body: detStream, header: "miss", calls: 1},
			{body: detStream, header: "hit", calls: 1},
			{body: detStreamUsage, header: "miss", calls: 2}, // its refill carries usage
			{body: det, header: "hit", calls: 2},
			{body: detStream, header: "hit", calls: 2},
		}},
		{name: "an entry without usage is a miss for JSON", steps: []step{
			{body: detStream, header: "miss", calls: 1},
			{body: det, header: "miss", calls: 2},
			{body: detStreamUsage, header: "hit", calls: 2},
		}},
		{name: "enabled by the tenant's policy though off in config", mutate: func(o *Options) { o.Config.Enabled = false },
			policy: cacheOverride(true), steps: []step{
				{body: det, header: "miss", calls: 1},
				{body: det, header: "hit", calls: 1},
			}},
		{name: "disabled by the tenant's policy: untouched", policy: cacheOverride(false), steps: []step{
			{body: det, header: "", calls: 1},
			{body: det, header: "", calls: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := &upstream{content: "Hello there", finish: tt.up.finish, tools: tt.up.tools}
			if tt.up.content == "-" {
				up.content = ""
			}
			clk := newClock()
			h, _ := newCache(up, clk, tt.mutate)
			for i, s := range tt.steps {
				clk.Advance(s.advance)
				r := newReq(s.body, "acme")
				r.Tenant.Policy = tt.policy
				r.Hints.Cache = s.hint
				resp, err := h.Chat(context.Background(), r)
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				if resp.Stream != nil {
					chunks, err := drain(t, resp.Stream)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if a := checkStream(t, chunks, r.IncludeUsage); r.IncludeUsage && !strings.Contains(a.Usage, `"prompt_tokens":12`) {
						t.Fatalf("step %d: usage %q", i, a.Usage)
					}
				} else if !gjson.ValidBytes(resp.Body) || !gjson.GetBytes(resp.Body, "usage.prompt_tokens").Exists() {
					t.Fatalf("step %d: body %q", i, resp.Body)
				}
				if got := r.Meta.Get(HeaderCache); got != s.header {
					t.Errorf("step %d: %s = %q, want %q", i, HeaderCache, got, s.header)
				}
				if got := up.calls.Load(); got != s.calls {
					t.Errorf("step %d: upstream calls = %d, want %d", i, got, s.calls)
				}
			}
		})
	}
}

// answer describes an upstream answer in a test table ("-" = empty content).
func answer(finish, content string, tools ...string) struct {
	finish, content string
	tools           []string
} {
	return struct {
		finish, content string
		tools           []string
	}{finish, content, tools}
}

func TestParseHints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want hints
	}{
		{name: "empty", in: ""},
		{name: "no-cache", in: "no-cache", want: hints{noCache: true}},
		{name: "list, case, spaces", in: " No-Store , ttl=30", want: hints{noStore: true, ttl: 30 * time.Second}},
		{name: "ttl=0 is no-store", in: "ttl=0", want: hints{noStore: true}},
		{name: "ttl capped", in: "ttl=999999999", want: hints{ttl: maxHintTTL}},
		{name: "garbage ignored", in: "ttl=x,ttl=-1,max-age=3,,", want: hints{}},
		{name: "the shortest ttl", in: "ttl=60, ttl=10, ttl=30", want: hints{ttl: 10 * time.Second}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := parseHints(tt.in); got != tt.want {
				t.Errorf("parseHints(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzParseHints(f *testing.F) {
	for _, s := range []string{"no-cache", "no-store, ttl=60", "ttl=", "ttl=99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := parseHints(s)
		if h.ttl < 0 || h.ttl > maxHintTTL {
			t.Fatalf("ttl %v out of range", h.ttl)
		}
	})
}

func TestResponseCacheHitRendering(t *testing.T) {
	t.Parallel()
	up := &upstream{content: "Hello there"}
	clk := newClock()
	h, _ := newCache(up, clk, nil)
	first, err := h.Chat(context.Background(), newReq(det, "acme"))
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Second)
	r := newReq(det, "acme")
	r.Model = "demo-alias"
	hit, err := h.Chat(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	a, b := gjson.ParseBytes(first.Body), gjson.ParseBytes(hit.Body)
	if b.Get("id").String() == a.Get("id").String() || !strings.HasPrefix(b.Get("id").String(), "chatcmpl-") {
		t.Errorf("hit id %q must be fresh", b.Get("id").String())
	}
	if b.Get("created").Int() != clk.Now().Unix() || b.Get("model").String() != "demo-alias" || b.Get("object").String() != "chat.completion" {
		t.Errorf("hit header fields wrong: %s", hit.Body)
	}
	for _, path := range []string{"choices", "usage", "system_fingerprint"} {
		if a.Get(path).Raw != b.Get(path).Raw {
			t.Errorf("%s changed: %s vs %s", path, a.Get(path).Raw, b.Get(path).Raw)
		}
	}
}

func TestResponseCacheTenantsNeverShare(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		shared      bool
		serverTools bool
		header      string
	}{
		{name: "per tenant", shared: false, header: "miss"},
		{name: "shared_across_tenants", shared: true, header: "hit"},
		// Answers may hold results of server tools one tenant may use and
		// another may not: never shared when server tools exist.
		{name: "shared but server tools", shared: true, serverTools: true, header: "miss"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			up := &upstream{content: "Hello"}
			h, _ := newCache(up, newClock(), func(o *Options) { o.Config.SharedAcross, o.ServerTools = tt.shared, tt.serverTools })
			if _, err := h.Chat(context.Background(), newReq(det, "acme")); err != nil {
				t.Fatal(err)
			}
			r := newReq(det, "globex")
			if _, err := h.Chat(context.Background(), r); err != nil {
				t.Fatal(err)
			}
			if got := r.Meta.Get(HeaderCache); got != tt.header {
				t.Errorf("second tenant: %q, want %q", got, tt.header)
			}
		})
	}
}

func TestResponseCacheSingleFlight(t *testing.T) {
	t.Parallel()
	up := &upstream{content: "Hello there", delay: 100 * time.Millisecond}
	h, _ := newCache(up, newClock(), nil)
	const n = 10
	var wg sync.WaitGroup
	bodies := make([][]byte, n)
	headers := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			r := newReq(det, "acme")
			resp, err := h.Chat(context.Background(), r)
			errs[i], headers[i] = err, r.Meta.Get(HeaderCache)
			if resp != nil {
				bodies[i] = resp.Body
			}
		})
	}
	wg.Wait()
	if got := up.calls.Load(); got != 1 {
		t.Fatalf("upstream calls = %d, want 1", got)
	}
	ids := map[string]bool{}
	misses := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("request %d: %v", i, errs[i])
		}
		if c := gjson.GetBytes(bodies[i], "choices.0.message.content").String(); c != "Hello there" {
			t.Errorf("request %d content %q", i, c)
		}
		ids[gjson.GetBytes(bodies[i], "id").String()] = true
		if headers[i] == "miss" {
			misses++
		}
	}
	if misses != 1 || len(ids) != n {
		t.Errorf("misses = %d (want 1), distinct ids = %d (want %d)", misses, len(ids), n)
	}
}

// A leader whose client left does not fail its followers, and they do not
// each call the upstream then: one of them leads a new flight and the others
// share its answer.
func TestResponseCacheSingleFlightLeaderGone(t *testing.T) {
	t.Parallel()
	up := &upstream{content: "Hello there", delay: 200 * time.Millisecond}
	h, _ := newCache(up, newClock(), nil)
	leaderCtx, cancel := context.WithCancel(context.Background())
	leaderDone := make(chan error, 1)
	go func() {
		_, err := h.Chat(leaderCtx, newReq(det, "acme"))
		leaderDone <- err
	}()
	time.Sleep(50 * time.Millisecond)
	const n = 6
	var wg sync.WaitGroup
	followers := make([]*pipeline.Response, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { followers[i], errs[i] = h.Chat(context.Background(), newReq(det, "acme")) })
	}
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-leaderDone; !errors.Is(err, context.Canceled) {
		t.Errorf("leader: %v, want context.Canceled", err)
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("follower %d failed with the leader: %v", i, errs[i])
		}
		if c := gjson.GetBytes(followers[i].Body, "choices.0.message.content").String(); c != "Hello there" {
			t.Errorf("follower %d content %q", i, c)
		}
	}
	if got := up.calls.Load(); got != 2 {
		t.Errorf("upstream calls = %d, want 2 (the leader's, and one for the followers)", got)
	}
}

// failingStore fails every call.
type failingStore struct{}

func (failingStore) Get(context.Context, string) ([]byte, bool, error) {
	return nil, false, errors.New("store down")
}
func (failingStore) Set(context.Context, string, []byte, time.Duration) error {
	return errors.New("store down")
}

func TestResponseCacheStoreDownFailsOpen(t *testing.T) {
	t.Parallel()
	up := &upstream{content: "Hello"}
	h, _ := newCache(up, newClock(), func(o *Options) { o.Store = failingStore{} })
	for i := range 3 {
		r := newReq(det, "acme")
		resp, err := h.Chat(context.Background(), r)
		if err != nil || !gjson.ValidBytes(resp.Body) {
			t.Fatalf("request %d: %v", i, err)
		}
		if got := r.Meta.Get(HeaderCache); got != "bypass" {
			t.Errorf("request %d: header %q, want bypass", i, got)
		}
	}
	if up.calls.Load() != 3 {
		t.Errorf("upstream calls = %d", up.calls.Load())
	}
}

func TestResponseCacheUpstreamErrorNotStored(t *testing.T) {
	t.Parallel()
	up := &upstream{err: pipeline.Errorf(502, "server_error", "upstream_error", "boom")}
	h, store := newCache(up, newClock(), nil)
	if _, err := h.Chat(context.Background(), newReq(det, "acme")); err == nil {
		t.Fatal("error swallowed")
	}
	if store.Len() != 0 {
		t.Error("an error was stored")
	}
}

// TestResponseCacheStreamPassThrough checks that a stream miss hands every
// chunk to the client as it arrives, and that only a clean end is stored.
func TestResponseCacheStreamPassThrough(t *testing.T) {
	t.Parallel()
	stream := `{"model":"demo","temperature":0,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`
	chunks := (&upstream{content: "Hello there"}).chunks("stop", false)
	tests := []struct {
		name   string
		end    error // after the chunks; nil = io.EOF
		cut    int   // client stops after this many chunks; 0 = reads all
		stored bool
	}{
		{name: "clean end stored", stored: true},
		{name: "cut stream not stored", end: &pipeline.UpstreamError{Kind: pipeline.UpstreamCut}},
		{name: "client gone not stored", cut: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := &gatedStream{chunks: chunks, gate: make(chan struct{}, 1), end: tt.end}
			up := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
				return &pipeline.Response{Stream: src}, nil
			})
			h, store := newCache(up, newClock(), nil)
			resp, err := h.Chat(context.Background(), newReq(stream, "acme"))
			if err != nil {
				t.Fatal(err)
			}
			for i := range chunks {
				if tt.cut > 0 && i == tt.cut {
					break
				}
				src.gate <- struct{}{} // release exactly one upstream chunk
				c, err := resp.Stream.Next()
				if err != nil || string(c) != chunks[i] {
					t.Fatalf("chunk %d: %q, %v; want it unchanged and immediate", i, c, err)
				}
			}
			if tt.cut == 0 {
				close(src.gate)
				if _, err := resp.Stream.Next(); (err == io.EOF) != (tt.end == nil) {
					t.Fatalf("end: %v", err)
				}
			}
			resp.Stream.Close()
			if got := store.Len() == 1; got != tt.stored {
				t.Errorf("stored = %v, want %v", got, tt.stored)
			}
		})
	}
}

// gatedStream yields one chunk per receive on gate (all of them once gate
// is closed), then end or io.EOF.
type gatedStream struct {
	chunks []string
	gate   chan struct{}
	end    error
	i      int
}

func (s *gatedStream) Next() ([]byte, error) {
	if s.i >= len(s.chunks) {
		if s.end != nil {
			return nil, s.end
		}
		return nil, io.EOF
	}
	<-s.gate
	s.i++
	return []byte(s.chunks[s.i-1]), nil
}

func (s *gatedStream) Close() {}

func TestCacheable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body   string
		always, want bool
	}{
		{name: "temperature 0", body: `{"model":"m","messages":[],"temperature":0}`, want: true},
		{name: "no temperature", body: `{"model":"m","messages":[]}`},
		{name: "no temperature, always", body: `{"model":"m","messages":[]}`, always: true, want: true},
		{name: "temperature 0.7", body: `{"temperature":0.7}`},
		{name: "temperature as a string", body: `{"temperature":"0"}`},
		{name: "first of a repeated key", body: `{"temperature":0,"temperature":1}`, want: true},
		{name: "n 1", body: `{"temperature":0,"n":1}`, want: true},
		{name: "n null", body: `{"temperature":0,"n":null}`, want: true},
		{name: "n 2", body: `{"temperature":0,"n":2}`},
		{name: "logprobs", body: `{"temperature":0,"logprobs":true}`},
		{name: "logprobs false", body: `{"temperature":0,"logprobs":false}`, want: true},
		{name: "audio output", body: `{"temperature":0,"modalities":["text","audio"]}`},
		{name: "text output", body: `{"temperature":0,"modalities":["text"]}`, want: true},
		{name: "nested keys do not count", body: `{"temperature":0,"metadata":{"n":3,"logprobs":true}}`, want: true},
		{name: "escaped key", body: `{"temper\u0061ture":0}`, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := cacheable(&pipeline.Request{Body: []byte(tc.body)}, tc.always); got != tc.want {
				t.Fatalf("cacheable(%s, %v) = %v, want %v", tc.body, tc.always, got, tc.want)
			}
		})
	}
}

// An answer a fallback model gave (fallback.HeaderModel names another
// model than the request's) is not stored, but the followers of its single
// flight get it, named as the fallback's: run again, each would first wait
// for the primary that had just failed (a stall: its whole timeout again),
// then get the same fallback. The next request calls the model again, and
// the model's own answer is stored.
func TestResponseCacheFallbackAnswerSharedNotStored(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	up := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		answered, content := testRoute.Name, "from the model"
		if calls.Add(1) == 1 {
			time.Sleep(100 * time.Millisecond) // the followers join the flight
			answered, content = "backup", "from the backup"
		}
		r.Meta.Set(fallback.HeaderModel, answered)
		body := `{"id":"chatcmpl-up","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"` +
			content + `"},"finish_reason":"stop"}],"usage":` + upstreamUsage + `}`
		return &pipeline.Response{Body: []byte(body)}, nil
	})
	h, _ := newCache(up, newClock(), nil)
	ask := func() (string, string, string) {
		r := newReq(det, "acme")
		resp, err := h.Chat(context.Background(), r)
		if err != nil {
			t.Error(err)
			return "", "", ""
		}
		return gjson.GetBytes(resp.Body, "choices.0.message.content").Str, r.Meta.Get(HeaderCache), r.Meta.Get(fallback.HeaderModel)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if c, hv, m := ask(); c != "from the backup" || hv != "miss" || m != "backup" {
			t.Errorf("leader: %q, %s, %s", c, hv, m)
		}
	})
	time.Sleep(30 * time.Millisecond)
	for range 3 {
		wg.Go(func() {
			if c, hv, m := ask(); c != "from the backup" || hv != "hit" || m != "backup" {
				t.Errorf("follower: %q, %s, %s; want the backup's answer, named so", c, hv, m)
			}
		})
	}
	wg.Wait()
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d calls, want the leader's only", n)
	}
	if c, hv, _ := ask(); c != "from the model" || hv != "miss" || calls.Load() != 2 {
		t.Fatalf("next: %q, %s, %d calls; want the model called again (the backup's answer was not stored)", c, hv, calls.Load())
	}
	if c, hv, _ := ask(); c != "from the model" || hv != "hit" || calls.Load() != 2 {
		t.Fatalf("after: %q, %s, %d calls; want the model's answer from the cache", c, hv, calls.Load())
	}
}

// TestResponseCacheStreamEndWaits: a stream miss the cache will store at
// its end in a store over the network tells the request's Lookahead so,
// and the writer then does not hold the last events for it; a request
// that may not be stored, or a memory store, does not.
func TestResponseCacheStreamEndWaits(t *testing.T) {
	t.Parallel()
	const body = `{"model":"demo","temperature":0,"stream":true,"messages":[{"role":"user","content":"Hi"}]}`
	for _, tc := range []struct {
		name, hints string
		remote      bool
		waits       bool
	}{
		{"stored remotely", "", true, true},
		{"no-store", "no-store", true, false},
		{"stored in memory", "", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
				return &pipeline.Response{Stream: &gatedStream{chunks: (&upstream{content: "Hi"}).chunks("stop", false), gate: make(chan struct{})}}, nil
			})
			h, _ := newCache(up, newClock(), func(o *Options) {
				if tc.remote {
					o.Store = remoteStore{o.Store}
				}
			})
			r := newReq(body, "acme")
			r.Hints.Cache = tc.hints
			r.Lookahead = &pipeline.Lookahead{}
			r.Lookahead.Set(allHere{})
			resp, err := h.Chat(context.Background(), r)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Stream.Close()
			if got := !r.Lookahead.AllHere(); got != tc.waits {
				t.Fatalf("the end waits: %v, want %v", got, tc.waits)
			}
		})
	}
}

// remoteStore is a Store that is not a MemoryStore, as one over the
// network is.
type remoteStore struct{ Store }

// allHere is an upstream stream whose rest is always in memory.
type allHere struct{}

func (allHere) Buffered() bool { return true }
func (allHere) AllHere() bool  { return true }
