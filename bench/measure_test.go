package main

import (
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// TestEachMeasurementOpensItsOwnConnections: the connections an earlier
// load left idle are closed before the next measurement starts, so a low
// rate measured after a high one is served over the few connections it
// needs, not taken in turn over all the earlier load opened.
func TestEachMeasurementOpensItsOwnConnections(t *testing.T) {
	t.Parallel()
	var open atomic.Int64
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			time.Sleep(2 * time.Millisecond)
			ctx.SetBodyString("ok")
		},
		ConnState: func(_ net.Conn, s fasthttp.ConnState) {
			switch s {
			case fasthttp.StateNew:
				open.Add(1)
			case fasthttp.StateClosed, fasthttp.StateHijacked:
				open.Add(-1)
			}
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	addr := ln.Addr().String()
	tg := makeTarget("floor", addr, "http://"+addr+"/v1", false, nil, nil, 64)
	w := func(start time.Time) sample {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + addr + "/")
		err := tg.hc.Do(req, resp)
		return sample{lat: time.Since(start), err: err}
	}
	if s := closedLoop(32, 300*time.Millisecond, w); len(s) == 0 || s[0].err != nil {
		t.Fatalf("the high load failed: %v", s)
	}
	if n := open.Load(); n < 16 {
		t.Fatalf("the high load left %d connections open, want at least 16 for the test to mean anything", n)
	}
	legs := interleave([]job{{tg, w}}, loadSpec{rate: 20, dur: 300 * time.Millisecond, warm: 50 * time.Millisecond}, 1, 16)
	if legs[0].Errors > 0 || legs[0].Requests == 0 {
		t.Fatalf("the low load: %d requests, %d errors (%s)", legs[0].Requests, legs[0].Errors, legs[0].ErrorSample)
	}
	// 20 requests a second of 2 ms each need one connection; a stalled
	// scheduler sending a backlog at once may open a few more.
	for deadline := time.Now().Add(3 * time.Second); open.Load() > 8; {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open after the low load, want at most 8", open.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
