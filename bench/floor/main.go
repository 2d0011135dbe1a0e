// Command floor is the minimal fasthttp reverse proxy that bench/ measures the
// gateway against: the floor of what any fasthttp proxy costs. It forwards
// every request unchanged to one upstream over a pooled HostClient and
// streams the response back, flushing each upstream chunk as it arrives (SSE
// stays live). It parses nothing, logs nothing and keeps no metrics.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/valyala/fasthttp"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8091", "address to listen on")
	upstream := flag.String("upstream", "127.0.0.1:8090", "upstream host:port")
	maxConns := flag.Int("max-conns", 20000, "upstream connection pool size")
	readBuf := flag.Int("read-buffer", 4096, "per-connection read buffer of the server, bytes (fasthttp's default)")
	writeBuf := flag.Int("write-buffer", 4096, "per-connection write buffer of the server, bytes (fasthttp's default)")
	upReadBuf := flag.Int("upstream-read-buffer", 4096, "per-connection read buffer of the upstream client, bytes (fasthttp's default)")
	flag.Parse()

	hc := &fasthttp.HostClient{
		Addr:                *upstream,
		MaxConns:            *maxConns,
		MaxConnWaitTimeout:  10 * time.Second,
		StreamResponseBody:  true,
		MaxIdleConnDuration: 90 * time.Second,
		ReadBufferSize:      *upReadBuf,
	}
	handler := func(ctx *fasthttp.RequestCtx) {
		resp := fasthttp.AcquireResponse()
		ctx.Request.Header.Del("Connection")
		if err := hc.Do(&ctx.Request, resp); err != nil {
			fasthttp.ReleaseResponse(resp)
			ctx.Error("upstream: "+err.Error(), fasthttp.StatusBadGateway)
			return
		}
		resp.Header.CopyTo(&ctx.Response.Header)
		ctx.Response.Header.Del("Connection")
		if resp.Header.ContentLength() >= 0 { // sized body: copy it whole
			ctx.SetBody(resp.Body())
			fasthttp.ReleaseResponse(resp)
			return
		}
		// Chunked (SSE): the writer runs after the handler returns, so it owns resp.
		ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
			defer fasthttp.ReleaseResponse(resp)
			body := resp.BodyStream()
			buf := make([]byte, 4<<10)
			for {
				n, err := body.Read(buf)
				if n > 0 {
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
	srv := &fasthttp.Server{Handler: handler, Name: "floor", NoDefaultContentType: true, NoDefaultDate: true,
		ReadBufferSize: *readBuf, WriteBufferSize: *writeBuf}
	if err := srv.ListenAndServe(*listen); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}
