package mockllm

import (
	"bufio"
	"github.com/llmgw/gateway/jsonstring"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// echo answers any other /v1/* request with what arrived, for pass-through
// tests: {"method","proto","path","query","headers":{...},"body":<string>}. Header
// values are exact (Authorization included). Query parameters steer it:
// status=NNN answers with that status; sse=N streams N events
// `data: {"n":i,"echo":<the JSON above>}` with ChunkDelay between them, then
// [DONE]; usage=N reports N prompt tokens, as embeddings do: a top-level
// "usage":{"prompt_tokens":N,"total_tokens":N} after the echo (in the last
// event when streamed); delay=N waits N ms before the answer's head.
func (s *Server) echo(ctx *fasthttp.RequestCtx) {
	if ms, err := strconv.Atoi(string(ctx.QueryArgs().Peek("delay"))); err == nil && ms > 0 {
		s.sleep(time.Duration(ms) * time.Millisecond)
	}
	b := make([]byte, 0, 256+len(ctx.PostBody()))
	b = append(b, `{"method":`...)
	b = jsonstring.Append(b, string(ctx.Method()))
	b = append(b, `,"proto":`...)
	b = jsonstring.Append(b, string(ctx.Request.Header.Protocol()))
	b = append(b, `,"path":`...)
	b = jsonstring.Append(b, string(ctx.Path()))
	b = append(b, `,"query":`...)
	b = jsonstring.Append(b, string(ctx.QueryArgs().QueryString()))
	b = append(b, `,"headers":{`...)
	first := true
	for k, v := range ctx.Request.Header.All() {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = jsonstring.Append(b, string(k))
		b = append(b, ':')
		b = jsonstring.Append(b, string(v))
	}
	b = append(b, `},"body":`...)
	b = jsonstring.Append(b, string(ctx.PostBody()))
	b = append(b, '}')
	var usage []byte
	if v, err := strconv.Atoi(string(ctx.QueryArgs().Peek("usage"))); err == nil && v >= 0 {
		usage = append(usage, `,"usage":{"prompt_tokens":`...)
		usage = strconv.AppendInt(usage, int64(v), 10)
		usage = append(usage, `,"total_tokens":`...)
		usage = strconv.AppendInt(usage, int64(v), 10)
		usage = append(usage, '}')
	}

	status := fasthttp.StatusOK
	if v, err := strconv.Atoi(string(ctx.QueryArgs().Peek("status"))); err == nil && v >= 200 && v <= 599 {
		status = v
	}
	ctx.SetStatusCode(status)
	n, err := strconv.Atoi(string(ctx.QueryArgs().Peek("sse")))
	if err != nil || n <= 0 {
		ctx.SetContentType("application/json")
		if usage != nil {
			b = append(append(b[:len(b)-1], usage...), '}')
		}
		ctx.SetBody(b)
		return
	}
	ctx.SetContentType("text/event-stream; charset=utf-8")
	ctx.Response.Header.Set("Cache-Control", "no-cache")
	delay := s.opts.ChunkDelay
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		ev := make([]byte, 0, len(b)+32)
		for i := 0; i < n; i++ {
			if i > 0 && !s.sleep(delay) {
				return
			}
			ev = append(ev[:0], `data: {"n":`...)
			ev = strconv.AppendInt(ev, int64(i), 10)
			ev = append(ev, `,"echo":`...)
			ev = append(ev, b...)
			if i == n-1 {
				ev = append(ev, usage...)
			}
			ev = append(ev, "}\n\n"...)
			if _, err := w.Write(ev); err != nil {
				return
			}
			if w.Flush() != nil {
				return
			}
		}
		_, _ = w.Write(doneEvent)
		_ = w.Flush()
	})
}

// listModels answers GET /v1/models and GET /v1/models/{id}.
func (s *Server) listModels(ctx *fasthttp.RequestCtx, path []byte) {
	ctx.SetContentType("application/json")
	if id := path[len("/v1/models"):]; len(id) > 1 {
		ctx.SetBody(appendModel(nil, string(id[1:])))
		return
	}
	b := append([]byte(nil), `{"object":"list","data":[`...)
	for i, m := range s.models {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendModel(b, m)
	}
	ctx.SetBody(append(b, "]}"...))
}

func appendModel(dst []byte, id string) []byte {
	dst = append(dst, `{"id":`...)
	dst = jsonstring.Append(dst, id)
	dst = append(dst, `,"object":"model","created":`...)
	dst = strconv.AppendInt(dst, modelsCreated, 10)
	return append(dst, `,"owned_by":"mockllm"}`...)
}
