package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/sse"
)

const chatPath = "/v1/chat/completions"

// target is one endpoint under load: the mock itself (direct), the floor
// proxy, the gateway, or a peer (-target, -peer). Its clients are safe for
// concurrent use.
type target struct {
	name     string // direct | floor | gateway | the peer's name
	addr     string // host:port
	base     string // OpenAI base URL, ".../v1": paths replace its "/v1"
	proxy    *child // the process whose cost is measured (the mock for direct); nil for a peer bench did not start
	upstream *child // the mock behind a proxy; nil for direct
	headers  [][2]string
	model    string // "" = the bodies' own model; else every body's "model" is replaced
	hc       *fasthttp.HostClient
	shc      *fasthttp.HostClient // streams the response body

	mu    sync.Mutex
	conns map[net.Conn]struct{} // every open conn of shc, so streams can be cut at once
}

// gcLog is the garbage collections of the measured process (nil, which
// reads none, when bench did not start it).
func (t *target) gcLog() *gcLog {
	if t.proxy == nil {
		return nil
	}
	return t.proxy.gc
}

// newTarget is a target on a child bench started, over plain HTTP.
func newTarget(name string, proxy, upstream *child, maxConns int) *target {
	return makeTarget(name, proxy.addr, "http://"+proxy.addr+"/v1", false, proxy, upstream, maxConns)
}

func makeTarget(name, addr, base string, isTLS bool, proxy, upstream *child, maxConns int) *target {
	t := &target{name: name, addr: addr, base: base, proxy: proxy, upstream: upstream, conns: map[net.Conn]struct{}{}}
	t.hc = &fasthttp.HostClient{
		Addr: addr, IsTLS: isTLS, MaxConns: maxConns, MaxConnWaitTimeout: 30 * time.Second,
		ReadTimeout: 60 * time.Second, WriteTimeout: 10 * time.Second, MaxIdemponentCallAttempts: 1,
	}
	t.shc = &fasthttp.HostClient{
		Addr: addr, IsTLS: isTLS, MaxConns: maxConns, MaxConnWaitTimeout: 30 * time.Second,
		ReadTimeout: 60 * time.Second, WriteTimeout: 10 * time.Second, MaxIdemponentCallAttempts: 1,
		StreamResponseBody: true,
		Dial: func(addr string) (net.Conn, error) {
			c, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return nil, err
			}
			tc := &trackedConn{Conn: c, t: t}
			t.mu.Lock()
			t.conns[tc] = struct{}{}
			t.mu.Unlock()
			return tc, nil
		},
	}
	return t
}

// closeIdle closes the idle connections of the target's clients.
func (t *target) closeIdle() {
	if t.hc != nil {
		t.hc.CloseIdleConnections()
	}
	if t.shc != nil {
		t.shc.CloseIdleConnections()
	}
}

// cutStreams closes every streaming connection (ends held streams at once).
func (t *target) cutStreams() {
	t.mu.Lock()
	cs := make([]net.Conn, 0, len(t.conns))
	for c := range t.conns {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
	t.shc.CloseIdleConnections()
}

type trackedConn struct {
	net.Conn
	t    *target
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		delete(c.t.conns, c)
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

// chatRequest returns a pooled chat completions POST of body, and a pooled
// response; the caller releases both.
func (t *target) chatRequest(body []byte) (*fasthttp.Request, *fasthttp.Response) {
	return t.request(chatPath, body)
}

// request returns a pooled POST of body to path (an OpenAI path, "/v1/..."),
// and a pooled response; the caller releases both. body must not change
// while the request is in flight.
func (t *target) request(path string, body []byte) (*fasthttp.Request, *fasthttp.Response) {
	req := fasthttp.AcquireRequest()
	req.SetRequestURI(t.base + strings.TrimPrefix(path, "/v1"))
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.SetContentType("application/json")
	for _, h := range t.headers {
		req.Header.Set(h[0], h[1])
	}
	req.SetBodyRaw(body)
	return req, fasthttp.AcquireResponse()
}

// body is b as this target is sent it: with its model when -model set one.
// The result is new memory when it differs from b.
func (t *target) body(b []byte) []byte {
	if t.model == "" {
		return b
	}
	out, err := sjson.SetBytes(b, "model", t.model)
	if err != nil {
		return b
	}
	return out
}

// post sends body and returns the status, a header value and a copy of the
// response body.
func (t *target) post(body []byte, header string) (status int, hv string, respBody []byte, err error) {
	return t.postTo(chatPath, body, header)
}

// postTo is post to another path.
func (t *target) postTo(path string, body []byte, header string) (status int, hv string, respBody []byte, err error) {
	req, resp := t.request(path, body)
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	if err := t.hc.DoTimeout(req, resp, 60*time.Second); err != nil {
		return 0, "", nil, err
	}
	if header != "" {
		hv = string(resp.Header.Peek(header))
	}
	return resp.StatusCode(), hv, append([]byte(nil), resp.Body()...), nil
}

// plain is one non-streaming request that must answer 200 and pass check
// (which may be nil) on the named header's value and the body.
func (t *target) plain(body []byte, header string, check func(hv string, body []byte) error) workload {
	return t.plainTo(chatPath, body, header, check)
}

// plainTo is plain to another path.
func (t *target) plainTo(path string, body []byte, header string, check func(hv string, body []byte) error) workload {
	body = t.body(body)
	return func(start time.Time) sample {
		status, hv, rb, err := t.postTo(path, body, header)
		s := sample{lat: time.Since(start), err: err}
		if err == nil && status != 200 {
			s.err = fmt.Errorf("status %d: %.200s", status, rb)
		} else if err == nil && check != nil {
			s.err = check(hv, rb)
		}
		return s
	}
}

// stream is one streaming request: it records the first body byte, the
// first event with content (time to first content token), the gap between
// consecutive SSE events, and requires a final data: [DONE].
func (t *target) stream(body []byte) workload {
	body = t.body(body)
	return func(start time.Time) sample {
		var s sample
		err := t.readStream(body, func(first time.Time) { s.ttfb = first.Sub(start) },
			func(now time.Time, data []byte) bool {
				if s.ttft == 0 && contentDelta(data) {
					s.ttft = now.Sub(start)
					if held := gjson.GetBytes(data, "x_mock_held_ns").Int(); held > 0 {
						s.ttftPath = s.ttft - time.Duration(held)
						if at := gjson.GetBytes(data, "x_mock_received_unix_ns").Int(); at > 0 {
							s.toUpstream = time.Unix(0, at).Sub(start)
						}
					}
				}
				return true
			}, &s.gaps)
		s.lat = time.Since(start)
		s.err = err
		return s
	}
}

// maxEventBytes bounds one SSE event read from a target.
const maxEventBytes = 1 << 20

// readStream posts body on the streaming client and reads the SSE body to its
// end. onFirstByte (may be nil) is called once, when the first body bytes
// arrive. onEvent is called for every event with its data, which is only
// valid during the call; returning false abandons the stream. gaps, when not
// nil, collects the time between consecutive events.
func (t *target) readStream(body []byte, onFirstByte func(time.Time), onEvent func(now time.Time, data []byte) bool, gaps *[]time.Duration) error {
	req, resp := t.chatRequest(body)
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	if err := t.shc.Do(req, resp); err != nil {
		return err
	}
	if resp.StatusCode() != 200 {
		return fmt.Errorf("status %d: %.200s", resp.StatusCode(), resp.Body())
	}
	r := resp.BodyStream()
	if r == nil {
		return errors.New("no body stream")
	}
	rd := sse.NewReader(&firstByte{r: r, on: onFirstByte}, maxEventBytes)
	var last time.Time
	done := false
	for {
		ev, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		now := time.Now()
		if gaps != nil && !last.IsZero() {
			*gaps = append(*gaps, now.Sub(last))
		}
		last = now
		done = sse.IsDone(ev.Data)
		if !onEvent(now, ev.Data) {
			return nil
		}
	}
	if !done {
		return errors.New("stream ended without data: [DONE]")
	}
	return nil
}

// firstByte calls on (when not nil) at the first read that returns bytes.
type firstByte struct {
	r  io.Reader
	on func(time.Time)
}

func (f *firstByte) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 && f.on != nil {
		f.on(time.Now())
		f.on = nil
	}
	return n, err
}

// contentDelta reports whether an SSE event's data is a chat completion
// chunk whose delta carries content the user sees: a non-empty content
// string or a tool call. This is the "first content token"; a role
// or empty delta, usage and finish_reason chunks and invalid JSON do not
// count. data is only read; any bytes are safe.
func contentDelta(data []byte) bool {
	if !jsonvalid.Bytes(data) {
		return false
	}
	found := false
	gjson.GetBytes(data, "choices").ForEach(func(_, c gjson.Result) bool {
		d := c.Get("delta")
		content, calls := d.Get("content"), d.Get("tool_calls")
		found = content.Type == gjson.String && content.Str != "" || calls.IsArray() && calls.Get("0").Exists()
		return !found
	})
	return found
}

// toolClient is the client-driven equivalent of a server tool loop: it offers
// the calculator, answers each tool call itself and calls again, as an SDK
// would against a plain upstream. It needs the "tools-<N>" mock model.
func (t *target) toolClient(model string, rounds int) workload {
	base := []byte(`{"model":"` + model + `","messages":[{"role":"user","content":"compute twice"}],` +
		`"tools":[{"type":"function","function":{"name":"calculator","description":"Evaluate an arithmetic expression.",` +
		`"parameters":{"type":"object","properties":{"expression":{"type":"string"}},"required":["expression"]}}}]}`)
	return func(start time.Time) sample {
		body := base
		for call := 0; call <= rounds; call++ {
			status, _, rb, err := t.post(body, "")
			if err != nil {
				return sample{lat: time.Since(start), err: err}
			}
			if status != 200 {
				return sample{lat: time.Since(start), err: fmt.Errorf("status %d: %.200s", status, rb)}
			}
			msg := gjson.GetBytes(rb, "choices.0.message")
			calls := msg.Get("tool_calls")
			if !calls.IsArray() || len(calls.Array()) == 0 {
				if call != rounds {
					return sample{lat: time.Since(start), err: fmt.Errorf("answer after %d rounds, want %d", call, rounds)}
				}
				return sample{lat: time.Since(start)}
			}
			body, _ = sjson.SetRawBytes(body, "messages.-1", []byte(msg.Raw))
			for _, c := range calls.Array() {
				res := `{"role":"tool","tool_call_id":` + strconv.Quote(c.Get("id").String()) + `,"content":"{\"status\":\"ok\",\"data\":2}"}`
				body, _ = sjson.SetRawBytes(body, "messages.-1", []byte(res))
			}
		}
		return sample{lat: time.Since(start), err: fmt.Errorf("no answer after %d rounds", rounds)}
	}
}

// clientFallback is the client-driven equivalent of a gateway fallback: call
// the failing model, see the 500, call the healthy one.
func (t *target) clientFallback(failBody, okBody []byte) workload {
	return func(start time.Time) sample {
		status, _, rb, err := t.post(failBody, "")
		if err == nil && status != 500 {
			err = fmt.Errorf("failing model answered %d: %.200s", status, rb)
		}
		if err != nil {
			return sample{lat: time.Since(start), err: err}
		}
		return t.plain(okBody, "", nil)(start)
	}
}
