// Command floor is the minimal fasthttp reverse proxy that bench/ measures the
// gateway against: the floor of what any fasthttp proxy costs. It forwards
// every request unchanged to one upstream over a pooled HostClient and
// streams the response back, flushing each upstream chunk as it arrives (SSE
// stays live). It parses nothing, logs nothing and keeps no metrics.
//
// With -check it also does the least a gateway that checks and meters what
// it relays must do, and nothing else: the request body checked as JSON and
// its model read; a JSON answer checked and its usage read; each event of a
// streamed answer checked as JSON and any usage in it read; the tokens
// counted, with the gateway's own usage lookup. It still routes nothing,
// renames nothing and writes the bytes it read: the floor under a gateway
// of the gateway's design.
//
// With -log FILE it also writes one JSON access line per request to FILE,
// with zerolog, the fields the gateway's access line has (request id,
// method, path, model, status, stream, latency, bytes, tokens), through the
// leanest batching that still gets a line out within a millisecond: a
// 64 KiB buffer under a mutex, flushed when full and every millisecond.
//
// With -read-timeout, -idle-timeout and -call-timeout it also bounds what
// every production server bounds, as the gateway does: reading a request,
// a keep-alive connection's wait for the next one, and each upstream call.
// fasthttp enforces each with a socket deadline set per request or call.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/wire"
)

// tokens counts the usage -check read, as a meter would.
var tokens atomic.Int64

func main() {
	listen := flag.String("listen", "127.0.0.1:8091", "address to listen on")
	upstream := flag.String("upstream", "127.0.0.1:8090", "upstream host:port")
	maxConns := flag.Int("max-conns", 20000, "upstream connection pool size")
	readBuf := flag.Int("read-buffer", 4096, "per-connection read buffer of the server, bytes (fasthttp's default)")
	writeBuf := flag.Int("write-buffer", 4096, "per-connection write buffer of the server, bytes (fasthttp's default)")
	upReadBuf := flag.Int("upstream-read-buffer", 4096, "per-connection read buffer of the upstream client, bytes (fasthttp's default)")
	check := flag.Bool("check", false, "check the request, the answer and each stream event as JSON and read their model and usage")
	logFile := flag.String("log", "", "write one JSON access line per request to this file")
	readTimeout := flag.Duration("read-timeout", 0, "bound on reading a request (0: none, fasthttp's default)")
	idleTimeout := flag.Duration("idle-timeout", 0, "bound on a keep-alive connection's wait for its next request (0: the read timeout)")
	callTimeout := flag.Duration("call-timeout", 0, "bound on each upstream call, its answer's head and a JSON answer's body (0: none)")
	flag.Parse()

	o := options{upstream: *upstream, maxConns: *maxConns, readBuf: *readBuf, writeBuf: *writeBuf, upReadBuf: *upReadBuf,
		check: *check, readTimeout: *readTimeout, idleTimeout: *idleTimeout, callTimeout: *callTimeout}
	if *logFile != "" {
		f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
		bw := &batchWriter{w: bufio.NewWriterSize(f, 64<<10)}
		go bw.flushEvery(time.Millisecond)
		l := zerolog.New(bw).With().Timestamp().Logger()
		o.log = &l
	}
	if err := newServer(o).ListenAndServe(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

// options are the floor's settings, from its flags.
type options struct {
	upstream                     string
	maxConns                     int
	readBuf, writeBuf, upReadBuf int
	check                        bool
	log                          *zerolog.Logger // nil: no access lines
	readTimeout, idleTimeout     time.Duration
	callTimeout                  time.Duration
}

// newServer returns the floor proxy's server for o.
func newServer(o options) *fasthttp.Server {
	check, log := o.check, o.log
	hc := &fasthttp.HostClient{
		Addr:                o.upstream,
		MaxConns:            o.maxConns,
		MaxConnWaitTimeout:  10 * time.Second,
		StreamResponseBody:  true,
		MaxIdleConnDuration: 90 * time.Second,
		ConnPoolStrategy:    fasthttp.LIFO, // as the gateway's upstream client
		ReadBufferSize:      o.upReadBuf,
	}
	handler := func(ctx *fasthttp.RequestCtx) {
		var x access
		if log != nil {
			// Views, valid until fasthttp resets the request: after the
			// response, a stream's body writer included.
			x = access{log: log, start: time.Now(), method: ctx.Method(), path: ctx.Path()}
		}
		if check || log != nil {
			body := ctx.Request.Body()
			model := gjson.Get(unsafe.String(unsafe.SliceData(body), len(body)), "model")
			if check && (!jsonvalid.Bytes(body) || !model.Exists()) {
				ctx.Error("bad request", fasthttp.StatusBadRequest)
				x.write(fasthttp.StatusBadRequest, false, 0, 0, 0)
				return
			}
			x.model = model.String()
		}
		resp := fasthttp.AcquireResponse()
		ctx.Request.Header.Del("Connection")
		if o.callTimeout > 0 {
			ctx.Request.SetTimeout(o.callTimeout)
		}
		if err := hc.Do(&ctx.Request, resp); err != nil {
			fasthttp.ReleaseResponse(resp)
			ctx.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
			x.write(fasthttp.StatusBadGateway, false, 0, 0, 0)
			return
		}
		resp.Header.CopyTo(&ctx.Response.Header)
		ctx.Response.Header.Del("Connection")
		if resp.Header.ContentLength() >= 0 { // sized body: copy it whole
			var in, out int64
			if check {
				b := resp.Body()
				if !jsonvalid.Bytes(b) {
					fasthttp.ReleaseResponse(resp)
					ctx.Error("upstream: not JSON", fasthttp.StatusBadGateway)
					x.write(fasthttp.StatusBadGateway, false, 0, 0, 0)
					return
				}
				in, out = meter(gjson.Get(unsafe.String(unsafe.SliceData(b), len(b)), "usage"))
			}
			ctx.SetBody(resp.Body())
			x.write(resp.StatusCode(), false, len(resp.Body()), in, out)
			fasthttp.ReleaseResponse(resp)
			return
		}
		// Chunked (SSE): the writer runs after the handler returns, so it owns resp.
		status := resp.StatusCode()
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer fasthttp.ReleaseResponse(resp)
			body := resp.BodyStream()
			buf := make([]byte, 4<<10)
			var events eventChecker
			sent := 0
			defer func() { x.write(status, true, sent, events.in, events.out) }()
			for {
				n, err := body.Read(buf)
				if n > 0 {
					sent += n
					if check && !events.check(buf[:n]) {
						return // not JSON: cut the stream
					}
					if _, werr := w.Write(buf[:n]); werr != nil {
						return
					}
					if werr := w.Flush(); werr != nil {
						return // client gone: releasing resp closes the upstream conn
					}
				}
				if err != nil {
					return
				}
			}
		})
	}
	return &fasthttp.Server{Handler: handler, Name: "floor", NoDefaultContentType: true, NoDefaultDate: true,
		ReadBufferSize: o.readBuf, WriteBufferSize: o.writeBuf, ReadTimeout: o.readTimeout, IdleTimeout: o.idleTimeout}
}

// maxEventBytes bounds the partial event the checker keeps.
const maxEventBytes = 1 << 20

// meter counts the tokens of a usage object and returns them.
func meter(u gjson.Result) (in, out int64) {
	if u.IsObject() {
		in, out = u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int()
		tokens.Add(in + out)
	}
	return in, out
}

// access is what -log writes of one request; the zero value writes nothing.
type access struct {
	log          *zerolog.Logger
	start        time.Time
	method, path []byte
	model        string
}

// seq numbers the requests for their access lines' request ids.
var seq atomic.Uint64

func (x *access) write(status int, stream bool, bytes int, in, out int64) {
	if x.log == nil {
		return
	}
	var id [24]byte
	x.log.Info().Bytes("request_id", strconv.AppendUint(append(id[:0], "req-"...), seq.Add(1), 36)).
		Bytes("method", x.method).Bytes("path", x.path).Str("model", x.model).Int("status", status).Bool("stream", stream).
		Dur("latency", time.Since(x.start)).Int("bytes", bytes).Int64("prompt_tokens", in).Int64("completion_tokens", out).
		Msg("request")
}

// batchWriter is the leanest batching of log lines: a buffer under a
// mutex, written out when full and every flush interval.
type batchWriter struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (b *batchWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

func (b *batchWriter) flushEvery(d time.Duration) {
	for range time.Tick(d) {
		b.mu.Lock()
		_ = b.w.Flush()
		b.mu.Unlock()
	}
}

// eventChecker checks the SSE events of a stream as its bytes arrive: each
// data line's value JSON (or [DONE]), its usage metered. An event split
// across reads is checked once whole.
type eventChecker struct {
	partial []byte // the start of an event whose end has not come yet
	in, out int64  // the tokens metered
}

func (c *eventChecker) check(b []byte) bool {
	if len(c.partial) > 0 {
		b = append(c.partial, b...)
	}
	for {
		i := bytes.Index(b, []byte("\n\n"))
		if i < 0 {
			break
		}
		ev := b[:i]
		b = b[i+2:]
		for len(ev) > 0 {
			line := ev
			if j := bytes.IndexByte(ev, '\n'); j >= 0 {
				line, ev = ev[:j], ev[j+1:]
			} else {
				ev = nil
			}
			data, ok := bytes.CutPrefix(line, []byte("data:"))
			if !ok {
				continue
			}
			data = bytes.TrimPrefix(data, []byte(" "))
			if string(data) == "[DONE]" {
				continue
			}
			if !jsonvalid.Bytes(data) {
				return false
			}
			in, out := meter(wire.ChunkUsage(data))
			c.in, c.out = c.in+in, c.out+out
		}
	}
	if len(b) > maxEventBytes {
		return false // an event that never ends: cut the stream, as the gateway does
	}
	c.partial = append(c.partial[:0], b...)
	return true
}
