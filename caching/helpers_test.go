package caching

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// upstream is a fake inner handler: it counts calls and answers with a
// completion (JSON) or the same answer as chunks (stream), after delay.
type upstream struct {
	calls   atomic.Int64
	delay   time.Duration
	content string
	finish  string
	tools   []string // tool calls "name:args"; when set, the answer is a tool-call turn
	err     error
}

const chunkHead = `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1767225600,"model":"up-model","system_fingerprint":"fp_up","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`

const upstreamUsage = `{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0}}`

func (u *upstream) Chat(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
	u.calls.Add(1)
	if u.delay > 0 {
		select {
		case <-time.After(u.delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if u.err != nil {
		return nil, u.err
	}
	finish := u.finish
	if finish == "" {
		finish = "stop"
		if len(u.tools) > 0 {
			finish = "tool_calls"
		}
	}
	if r.Stream {
		return &pipeline.Response{Stream: sliceStream(u.chunks(finish, r.IncludeUsage))}, nil
	}
	msg := fmt.Sprintf(`{"role":"assistant","content":%q,"refusal":null}`, u.content)
	if len(u.tools) > 0 {
		var tcs []string
		for i, c := range u.tools {
			name, args, _ := strings.Cut(c, ":")
			tcs = append(tcs, fmt.Sprintf(`{"id":"call_%d","type":"function","function":{"name":%q,"arguments":%q}}`, i, name, args))
		}
		content := "null"
		if u.content != "" {
			content = fmt.Sprintf("%q", u.content)
		}
		msg = `{"role":"assistant","content":` + content + `,"refusal":null,"tool_calls":[` + strings.Join(tcs, ",") + `]}`
	}
	body := fmt.Sprintf(`{"id":"chatcmpl-up","object":"chat.completion","created":1767225600,"model":"up-model","choices":[{"index":0,"message":%s,"logprobs":null,"finish_reason":%q}],"usage":%s,"system_fingerprint":"fp_up"}`,
		msg, finish, upstreamUsage)
	return &pipeline.Response{Body: []byte(body)}, nil
}

func (u *upstream) chunks(finish string, usage bool) []string {
	var out []string
	if len(u.tools) > 0 {
		out = append(out, fmt.Sprintf(chunkHead, `{"role":"assistant","content":null}`, "null"))
		for i, c := range u.tools {
			name, args, _ := strings.Cut(c, ":")
			out = append(out, fmt.Sprintf(chunkHead, fmt.Sprintf(`{"tool_calls":[{"index":%d,"id":"call_%d","type":"function","function":{"name":%q,"arguments":""}}]}`, i, i, name), "null"))
			out = append(out, fmt.Sprintf(chunkHead, fmt.Sprintf(`{"tool_calls":[{"index":%d,"function":{"arguments":%q}}]}`, i, args), "null"))
		}
	} else {
		out = append(out, fmt.Sprintf(chunkHead, `{"role":"assistant","content":""}`, "null"))
		for _, w := range strings.SplitAfter(u.content, " ") {
			out = append(out, fmt.Sprintf(chunkHead, fmt.Sprintf(`{"content":%q}`, w), "null"))
		}
	}
	out = append(out, string(pipeline.KeepAlive))
	out = append(out, fmt.Sprintf(chunkHead, `{}`, fmt.Sprintf("%q", finish)))
	if usage {
		out = append(out, `{"id":"chatcmpl-up","object":"chat.completion.chunk","created":1767225600,"model":"up-model","choices":[],"usage":`+upstreamUsage+`}`)
	}
	return out
}

// sliceStream yields chunks then io.EOF, or err after the chunks when set.
func sliceStream(chunks []string) *testStream { return &testStream{chunks: chunks} }

type testStream struct {
	chunks []string
	i      int
	err    error
	closed atomic.Bool
}

func (s *testStream) Next() ([]byte, error) {
	if s.i >= len(s.chunks) {
		if s.err != nil {
			return nil, s.err
		}
		return nil, io.EOF
	}
	c := []byte(s.chunks[s.i])
	s.i++
	return c, nil
}

func (s *testStream) Close() { s.closed.Store(true) }

// drain reads a stream to its end and returns copies of its chunks.
func drain(t testing.TB, s pipeline.Stream) ([]string, error) {
	t.Helper()
	defer s.Close()
	var out []string
	for {
		c, err := s.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, string(c))
	}
}

// checkedAnswer is what a client accumulates from a stream.
type checkedAnswer struct {
	ID, Model, Content, Finish string
	Calls                      []string // "id name args"
	Usage                      string   // raw usage JSON, "" when none
}

// checkStream validates a chunk sequence against docs/wire.md rules 5 to 13 (one
// id/created/model, role once and first, dense sequential tool calls with
// id/type/name only in their first delta, no content on tool-call chunks, a
// separate finish chunk sent once, usage only as the last chunk with
// choices [] and only when asked, no top-level error key) and accumulates it.
func checkStream(t testing.TB, chunks []string, wantUsage bool) checkedAnswer {
	t.Helper()
	var a checkedAnswer
	var created int64
	roleSeen, finished, usageSeen := false, false, false
	type call struct{ id, name, args string }
	var calls []call
	for n, c := range chunks {
		if strings.HasPrefix(c, ":") {
			continue
		}
		if !json.Valid([]byte(c)) {
			t.Fatalf("chunk %d is not JSON: %s", n, c)
		}
		top := gjson.Parse(c)
		if top.Get("error").Exists() {
			t.Fatalf("chunk %d has a top-level error key: %s", n, c)
		}
		if top.Get("object").String() != "chat.completion.chunk" {
			t.Fatalf("chunk %d object = %q", n, top.Get("object").String())
		}
		if !top.Get("choices").IsArray() {
			t.Fatalf("chunk %d has no choices array", n)
		}
		if usageSeen {
			t.Fatalf("chunk %d after the usage chunk", n)
		}
		if a.ID == "" {
			a.ID, a.Model, created = top.Get("id").String(), top.Get("model").String(), top.Get("created").Int()
			if a.ID == "" || a.Model == "" || created == 0 {
				t.Fatalf("chunk %d lacks id/model/created: %s", n, c)
			}
		} else if top.Get("id").String() != a.ID || top.Get("model").String() != a.Model || top.Get("created").Int() != created {
			t.Fatalf("chunk %d changes id/model/created: %s", n, c)
		}
		u := top.Get("usage")
		if u.IsObject() {
			if !wantUsage {
				t.Fatalf("usage chunk not asked for: %s", c)
			}
			if len(top.Get("choices").Array()) != 0 {
				t.Fatalf("usage chunk with choices: %s", c)
			}
			usageSeen, a.Usage = true, u.Raw
			continue
		}
		if wantUsage && u.Type != gjson.Null {
			t.Fatalf("chunk %d lacks \"usage\":null: %s", n, c)
		}
		for _, ch := range top.Get("choices").Array() {
			if ch.Get("index").Int() != 0 {
				t.Fatalf("choice index %d", ch.Get("index").Int())
			}
			if finished {
				t.Fatalf("chunk %d repeats the choice after its finish: %s", n, c)
			}
			if !ch.Get("finish_reason").Exists() {
				t.Fatalf("chunk %d lacks the finish_reason key", n)
			}
			d := ch.Get("delta")
			if d.Get("role").Exists() {
				if roleSeen || n != 0 {
					t.Fatalf("role repeated or late in chunk %d", n)
				}
				roleSeen = true
			} else if !roleSeen {
				t.Fatalf("chunk %d before the role chunk", n)
			}
			tcs := d.Get("tool_calls").Array()
			if len(tcs) > 1 {
				t.Fatalf("chunk %d packs %d tool calls", n, len(tcs))
			}
			for _, tc := range tcs {
				if d.Get("content").Type == gjson.String {
					t.Fatalf("content on a tool-call chunk: %s", c)
				}
				i := int(tc.Get("index").Int())
				switch {
				case !tc.Get("index").Exists():
					t.Fatalf("tool call without index: %s", c)
				case i == len(calls):
					if tc.Get("id").String() == "" || tc.Get("type").String() != "function" || tc.Get("function.name").String() == "" {
						t.Fatalf("first delta of call %d lacks id/type/name: %s", i, c)
					}
					calls = append(calls, call{tc.Get("id").String(), tc.Get("function.name").String(), tc.Get("function.arguments").String()})
				case i == len(calls)-1:
					if tc.Get("id").Exists() || tc.Get("type").Exists() || tc.Get("function.name").Exists() {
						t.Fatalf("later delta of call %d repeats id/type/name: %s", i, c)
					}
					calls[i].args += tc.Get("function.arguments").String()
				default:
					t.Fatalf("tool call index %d out of order (have %d): %s", i, len(calls), c)
				}
			}
			a.Content += d.Get("content").String()
			if fr := ch.Get("finish_reason"); fr.Type == gjson.String {
				if len(d.Map()) != 0 {
					t.Fatalf("finish_reason on a chunk with a delta: %s", c)
				}
				finished, a.Finish = true, fr.Str
			}
		}
	}
	if !roleSeen || !finished {
		t.Fatalf("stream without role or finish: %v", chunks)
	}
	if wantUsage && !usageSeen {
		t.Fatalf("usage asked for but not sent")
	}
	for _, c := range calls {
		a.Calls = append(a.Calls, c.id+" "+c.name+" "+c.args)
	}
	return a
}

// clock is an injectable time source.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

var testRoute = &pipeline.Route{Name: "demo", Deployments: []pipeline.Target{{Provider: "mock", Upstream: "mock-1", Model: "demo"}}}

// newReq builds a request for the demo route.
func newReq(body string, tenant string) *pipeline.Request {
	r := &pipeline.Request{
		Body:  []byte(body),
		Model: "demo",
		Route: testRoute,
		Meta:  &pipeline.Meta{},
	}
	r.Stream = gjson.Get(body, "stream").Bool()
	r.IncludeUsage = gjson.Get(body, "stream_options.include_usage").Bool()
	if tenant != "" {
		r.Tenant = &pipeline.Tenant{Name: tenant}
	}
	return r
}

// newCache builds the middleware over up with a memory store.
func newCache(up pipeline.Handler, clk *clock, mutate func(*Options)) (pipeline.Handler, *MemoryStore) {
	store := NewMemoryStore(1 << 20)
	opts := Options{
		Config: config.Cache{Enabled: true, TTL: config.Duration(time.Minute)},
		Store:  store,
		Now:    clk.Now,
	}
	if mutate != nil {
		mutate(&opts)
	}
	return pipeline.Chain(up, NewResponseCache(opts)), store
}

// cacheOverride is a tenant policy that only overrides response caching.
type cacheOverride bool

func (cacheOverride) AllowsTool(string) bool               { return true }
func (cacheOverride) TracesTools() bool                    { return false }
func (c cacheOverride) CachesResponses(bool) bool          { return bool(c) }
func (cacheOverride) ApprovalRequired(string) (bool, bool) { return false, false }
