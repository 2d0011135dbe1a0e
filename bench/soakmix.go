package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"
)

// cacheTTL is the response cache's ttl in the bench gateway config
// ([middleware.cache] in gwconfig.go).
const cacheTTL = 10 * time.Minute

// soakMix is the traffic mix: every path the gateway has, and the faults it
// must survive (a failing deployment, a model with no fallback, clients that
// leave in the middle of a stream or before a reply).
func soakMix(t *target) []*soakKind {
	toolCheck := func(_ string, body []byte) error {
		if c := gjson.GetBytes(body, "choices.0.message.content").String(); !strings.HasPrefix(c, "done after 2 tool rounds") {
			return fmt.Errorf("unexpected answer %.120q", c)
		}
		return nil
	}
	// The cached answer expires every cacheTTL; the requests that arrive
	// before one of them has stored it again miss, once per expiry.
	var expired atomic.Int64 // when the current entry was last found missing (unix ns)
	expired.Store(time.Now().UnixNano())
	hit := func(hv string, _ []byte) error {
		switch strings.ToLower(hv) {
		case "hit":
			return nil
		case "miss":
			now, last := time.Now().UnixNano(), expired.Load()
			if now-last < int64(time.Second) ||
				(now-last > int64(cacheTTL-time.Minute) && expired.CompareAndSwap(last, now)) {
				return nil
			}
		}
		return fmt.Errorf("x-gateway-cache: %q, want hit", hv)
	}
	attempts := func(hv string, _ []byte) error {
		if n, _ := strconv.Atoi(hv); n < 2 {
			return fmt.Errorf("x-gateway-attempts: %q, want 2", hv)
		}
		return nil
	}
	failStream := bytes.Replace(streamBody, []byte(`"chat"`), []byte(`"fail-500"`), 1)
	noFallback := bytes.Replace(chatBody, []byte(`"chat"`), []byte(`"fail-503"`), 1)
	plain := func(w workload) func() error { return func() error { return w(time.Now()).err } }
	_, _, _, _ = t.post(cacheBody, "") // fill the cache entry the cache kind hits
	return []*soakKind{
		{Name: "chat", Weight: 3, Expect: "200", run: plain(t.plain(chatBody, "x-gateway-cache", noCacheHit))},
		{Name: "stream", Weight: 3, Expect: "200, ends with [DONE]", run: plain(t.stream(streamBody))},
		{Name: "toolloop", Weight: 2, Expect: "200 after two server-tool rounds", run: plain(t.plain(toolBody, "", toolCheck))},
		{Name: "cache", Weight: 2, Expect: "200, x-gateway-cache: hit (a miss when the 10 min TTL ends)", run: plain(t.plain(cacheBody, "x-gateway-cache", hit))},
		{Name: "fallback", Weight: 1, Expect: "200 after a 500 and a fallback", run: plain(t.plain(failBody, "x-gateway-attempts", attempts))},
		{Name: "stream-fallback", Weight: 1, Expect: "stream 200 after a 500 and a fallback", run: plain(t.stream(failStream))},
		{Name: "no-fallback", Weight: 1, Expect: "503 in the OpenAI envelope", run: func() error { return expectStatus(t, noFallback, 503) }},
		{Name: "stream-abandoned", Weight: 1, Expect: "client closes after 2 events", run: func() error { return abandon(t.addr, streamBody, 2) }},
		{Name: "plain-abandoned", Weight: 1, Expect: "client closes before the reply", run: func() error { return abandon(t.addr, chatBody, 0) }},
	}
}

// expectStatus posts body and requires status with an OpenAI error envelope.
func expectStatus(t *target, body []byte, want int) error {
	status, _, rb, err := t.post(body, "")
	if err != nil {
		return err
	}
	if status != want || !gjson.GetBytes(rb, "error.message").Exists() {
		return fmt.Errorf("status %d, want %d with an error envelope: %.200s", status, want, rb)
	}
	return nil
}

// abandon sends body on its own connection and closes it once events SSE
// events have arrived (0: right after sending, before any reply), as a
// client that goes away does.
func abandon(addr string, body []byte, events int) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", chatPath, addr, len(body))
	if _, err := io.WriteString(c, req); err != nil {
		return err
	}
	if _, err := c.Write(body); err != nil {
		return err
	}
	if events == 0 {
		time.Sleep(5 * time.Millisecond) // the request is in the gateway, the reply is 20 ms away
		return nil
	}
	var got []byte
	buf := make([]byte, 4096)
	for bytes.Count(got, []byte("\n\n")) < events+1 { // +1: the header block
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return fmt.Errorf("stream ended before %d events: %w", events, err)
		}
	}
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
		return fmt.Errorf("status line %.40q", got)
	}
	return nil
}
