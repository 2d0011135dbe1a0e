package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/llmgw/gateway/sse"
	"github.com/valyala/fasthttp"
)

// chunked frames body as HTTP/1.1 chunks of the given sizes (the last one
// takes the rest) and the last chunk, and returns the framed bytes and,
// for each body byte, its offset in them.
func chunked(body []byte, sizes []int) (framed []byte, at []int) {
	for len(body) > 0 {
		n := len(body)
		if len(sizes) > 0 {
			n = min(max(sizes[0], 1), n)
			sizes = sizes[1:]
		}
		framed = strconv.AppendInt(framed, int64(n), 16)
		framed = append(framed, "\r\n"...)
		for i := range n {
			at = append(at, len(framed)+i)
		}
		framed = append(framed, body[:n]...)
		framed = append(framed, "\r\n"...)
		body = body[n:]
	}
	return append(framed, "0\r\n\r\n"...), at
}

// readable is what a chunked reader stopped before body byte from can
// return without the network when the framed bytes before end are
// buffered: the buffered bytes of each chunk whose size line is whole,
// and of a chunk buffered to its last byte only when its closing CRLF is
// too (the reader reads it with that byte, and would wait).
func readable(body []byte, at []int, from, end int, sizes []int) []byte {
	var out []byte
	start := 0
	for chunk := 0; start < len(body); chunk++ {
		n := len(body) - start
		if chunk < len(sizes) {
			n = min(max(sizes[chunk], 1), n)
		}
		last := start + n - 1
		if last >= from {
			s := max(start, from)
			if s == start && at[start] > end {
				return out // its size line is not whole
			}
			if at[last] >= end { // the chunk goes on past the buffer
				for i := s; i <= last && at[i] < end; i++ {
					out = append(out, body[i])
				}
				return out
			}
			if at[last]+3 > end {
				return out // its CRLF is not whole
			}
			out = append(out, body[s:last+1]...)
		}
		start = last + 1
	}
	return out
}

// FuzzBufferedBody: the runs bufferedBody hands out are exactly the body
// bytes a chunked reader can return from the buffered bytes without
// reading the network, wherever the reader stopped and wherever the buffer
// ends, framing taken out; and it never panics on any bytes.
func FuzzBufferedBody(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\r\n\r\ndata: {}\n\n"), []byte{5, 3, 40}, uint16(3), uint16(30))
	f.Add([]byte("data: {\"x\":1}\n\n"), []byte{1, 1, 1}, uint16(0), uint16(200))
	f.Add([]byte("xyz"), []byte{}, uint16(1), uint16(5))
	f.Add([]byte("xyz"), []byte{}, uint16(0), uint16(11)) // to the last chunk, without its blank line
	f.Add([]byte("xyz"), []byte{}, uint16(0), uint16(13)) // to the body's end
	f.Fuzz(func(t *testing.T, body, sizeBytes []byte, fromRaw, endRaw uint16) {
		if len(body) == 0 {
			return
		}
		sizes := make([]int, len(sizeBytes))
		for i, c := range sizeBytes {
			sizes[i] = int(c)
		}
		framed, at := chunked(body, sizes)
		from := int(fromRaw) % len(body) // the reader stopped before this body byte
		// Where the reader stopped in the framing: before the byte itself,
		// or (at a chunk's start) before its size line.
		pos, left := at[from], 0
		chunkStart := from == 0 || at[from-1] != at[from]-1
		if chunkStart {
			pos = bytes.LastIndex(framed[:at[from]-2], []byte("\r\n"))
			if pos < 0 {
				pos = 0
			} else {
				pos += 2
			}
		} else {
			// Bytes of this chunk left: up to its end.
			for i := from; i < len(body) && at[i] == at[from]+(i-from); i++ {
				left++
			}
		}
		end := pos + int(endRaw)%(len(framed)-pos+1)
		raw := framed[pos:end]
		length := -1
		b := bodyReader{left: &left, length: &length}
		var got []byte
		ends := b.bufferedBody(raw, func(run []byte) bool { got = append(got, run...); return true })
		want := readable(body, at, from, end, sizes)
		if !bytes.Equal(got, want) {
			t.Fatalf("framed %q from %d (left %d), buffered to %d: got %q, want %q", framed, pos, left, end, got, want)
		}
		// The body's end counts as buffered only with the last chunk's
		// blank line, the framing's last byte.
		if ends != (end == len(framed)) {
			t.Fatalf("framed %q from %d (left %d), buffered to %d of %d: end reported %v", framed, pos, left, end, len(framed), ends)
		}
		// Arbitrary bytes: no panic.
		b.bufferedBody(body, func([]byte) bool { return true })
		b.eventEnds(body, raw)
		b.firstIsData(body)
	})
}

// TestEventEnds: the end of an event begun in the SSE reader counts only
// when the body bytes readable without the network hold it, framing taken
// out: a blank line that the framing makes (a CRLF after a chunk's data,
// or a chunk that starts with a line end) is none.
func TestEventEnds(t *testing.T) {
	t.Parallel()
	length := -1
	for _, tc := range []struct {
		name      string
		tail, raw string
		left      int
		want      bool
	}{
		{"end in the chunk", `data: {"a"`, ":1}\n\ndata: {", 20, true},
		{"end in the next chunk", `data: {"a"`, ":1}\r\n4\r\n\n\nxy\r\n", 3, true},
		{"the framing's CRLF is no blank line", `data: {"a"`, ":1}\r\n\r\n5\r\n", 5, false},
		{"a chunk starting with a line end", `data: {"a":1}` + "\r", "\n\r\n2\r\n\r\n", 1, false},
		{"the chunk's CRLF not buffered yet", `data: {"a"`, ":1}\n\n", 5, false},
		{"the chunk goes on past the buffer", `data: {"a"`, ":1}\n\n", 6, true},
		{"the end split across the tail", "data: {\"a\":1}\n", "\n", 1 << 20, true},
		{"the body's last chunk", `data: {"a"`, "0\r\n\r\n", 0, false},
	} {
		left := tc.left
		b := bodyReader{left: &left, length: &length}
		if got := b.eventEnds([]byte(tc.tail), []byte(tc.raw)); got != tc.want {
			t.Errorf("%s: eventEnds(%q, %q) = %v, want %v", tc.name, tc.tail, tc.raw, got, tc.want)
		}
	}
}

// gateReader is the network under a fasthttp response: it hands out data
// in the given pieces while open, and records a read made while closed.
type gateReader struct {
	data     []byte
	pos      int
	pieces   []int
	pi       int
	open     bool
	violated bool
}

var errGateClosed = errors.New("read with the gate closed")

func (g *gateReader) Read(p []byte) (int, error) {
	if !g.open {
		g.violated = true
		return 0, errGateClosed
	}
	if g.pos >= len(g.data) {
		return 0, errGateClosed // nothing more: a real read would wait
	}
	n := len(g.data) - g.pos
	if len(g.pieces) > 0 {
		n = min(n, g.pieces[g.pi%len(g.pieces)])
		g.pi++
	}
	n = min(n, len(p))
	copy(p, g.data[g.pos:g.pos+n])
	g.pos += n
	return n, nil
}

// gateTokens are what FuzzBufferedNeverReads builds bodies from: SSE lines,
// line ends of every kind, comments, [DONE], a BOM, bytes that look like
// chunk framing.
var gateTokens = []string{
	`data: {"a":1}`, `data:{"b":2}`, "\n", "\r", "\r\n", ": c", "data: [DONE]", "event: x",
	"data", "\xEF\xBB\xBF", "id: 1", "data: ", `data: {"long":"` + strings.Repeat("x", 60) + `"}`, "\n\n", "\r\n\r\n", "0", "\r\n0\r\n",
}

// gateResponse frames body as an HTTP response: chunked (with size lines
// in several spellings), sized, or read to the connection's close.
func gateResponse(body, sizes []byte, mode byte) []byte {
	switch mode % 4 {
	case 1:
		return append([]byte("HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body...)
	case 2:
		return append([]byte("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"), body...)
	}
	out := []byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
	for i := 0; len(body) > 0; i++ {
		n, style := len(body), byte(0)
		if i < len(sizes) {
			n, style = min(max(int(sizes[i]&0x3f), 1), n), sizes[i]>>6
		}
		h := strconv.FormatInt(int64(n), 16)
		switch style {
		case 1:
			h = "00" + h + ";ext=1"
		case 2:
			h = strings.ToUpper(h) + "\t "
		case 3:
			h += `; a="b"`
		}
		out = append(out, h+"\r\n"...)
		out = append(out, body[:n]...)
		out = append(out, "\r\n"...)
		body = body[n:]
	}
	return append(out, "0\r\n\r\n"...)
}

// gateBodyReader is bodyReaderOf for the body stream of a response read
// directly (no client wrapper around it): the same fields, found here so
// that the package's learnt field path stays the client's.
func gateBodyReader(rs io.Reader) bodyReader {
	v := reflect.ValueOf(rs).Elem()
	f := func(name string) unsafe.Pointer {
		sf, _ := v.Type().FieldByName(name)
		return unsafe.Pointer(v.Field(sf.Index[0]).UnsafeAddr())
	}
	return bodyReader{br: *(**bufio.Reader)(f("reader")), left: (*int)(f("chunkLeft")), length: (*int)(f("contentLength"))}
}

// FuzzBufferedNeverReads: through fasthttp's own body reader and the SSE
// reader, whatever the bytes, framing, network pieces and buffer size,
// when Buffered says true the next Next reads nothing from the network
// (the gate is closed for it).
func FuzzBufferedNeverReads(f *testing.F) {
	f.Add([]byte{0, 2, 2, 1, 4, 4}, []byte{5, 3, 40}, []byte{3, 7}, byte(0), byte(0))
	f.Add([]byte{0, 4, 4, 0, 4, 4, 6, 4, 4}, []byte{200, 70, 9}, []byte{1}, byte(0), byte(10))
	f.Add([]byte{0, 13, 1, 13, 6, 13}, []byte{}, []byte{64}, byte(2), byte(40))
	f.Fuzz(func(t *testing.T, toks, sizes, pieces []byte, mode, bufSize byte) {
		var body []byte
		for _, c := range toks {
			body = append(body, gateTokens[int(c)%len(gateTokens)]...)
		}
		if len(body) == 0 {
			return
		}
		g := &gateReader{data: gateResponse(body, sizes, mode), open: true}
		for _, p := range pieces {
			g.pieces = append(g.pieces, int(p%64)+1)
		}
		resp := &fasthttp.Response{StreamBody: true}
		if err := resp.Read(bufio.NewReaderSize(g, 16+int(bufSize))); err != nil {
			return
		}
		rs := resp.BodyStream()
		s := &upstreamStream{ctx: context.Background(), pc: &providerClient{}, rd: sse.NewReader(rs, 256), body: gateBodyReader(rs), model: "m"}
		for step := 0; step < 1000; step++ {
			g.open = false
			g.open = !s.Buffered()
			_, err := s.Next()
			if g.violated {
				t.Fatalf("Buffered said true, and Next read the network (step %d, mode %d): %q, at %d", step, mode%4, g.data, g.pos)
			}
			if err != nil {
				return
			}
		}
	})
}

// TestBufferedSeesWholeEvents: events the connection's reader already
// holds count as buffered whatever the body's framing: chunked, sized, or
// read to the connection's close.
func TestBufferedSeesWholeEvents(t *testing.T) {
	t.Parallel()
	// Events longer than the SSE reader's first buffer: after the first,
	// the reader holds only the start of the next one.
	event := `data: {"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 1500) + `"}}]}` + "\n\n"
	body := []byte(strings.Repeat(event, 3) + "data: [DONE]\n\n")
	for mode, name := range []string{"chunked", "sized", "to the close"} {
		g := &gateReader{data: gateResponse(body, nil, byte(mode)), open: true}
		resp := &fasthttp.Response{StreamBody: true}
		if err := resp.Read(bufio.NewReaderSize(g, 8192)); err != nil {
			t.Fatal(err)
		}
		rs := resp.BodyStream()
		s := &upstreamStream{ctx: context.Background(), pc: &providerClient{}, rd: sse.NewReader(rs, 0), body: gateBodyReader(rs), model: "m"}
		if _, err := s.Next(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !s.Buffered() {
			t.Errorf("%s: the next event is in the connection's buffer, and Buffered says no", name)
		}
	}
}

// TestBufferedPassesOverPings: a data event the stream passes over (a
// keep-alive object of no choice and no usage) is not a chunk the next
// Next returns: Buffered says no, so the writer does not hold the content
// before it until the upstream's next event. The fuzzing of the read-ahead
// found it (the stream read on, to the network).
func TestBufferedPassesOverPings(t *testing.T) {
	t.Parallel()
	content := `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"up","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}` + "\n\n"
	for _, tc := range []struct {
		name, next string
		want       bool
	}{
		{"ping", `data: {"type":"ping"}` + "\n\n", false},
		{"content", content, true},
		{"usage", `data: {"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}` + "\n\n", true},
	} {
		g := &gateReader{data: gateResponse([]byte(content+tc.next), nil, 0), open: true}
		resp := &fasthttp.Response{StreamBody: true}
		if err := resp.Read(bufio.NewReaderSize(g, 4096)); err != nil {
			t.Fatal(err)
		}
		rs := resp.BodyStream()
		s := &upstreamStream{ctx: context.Background(), pc: &providerClient{}, rd: sse.NewReader(rs, 0), body: gateBodyReader(rs), model: "m"}
		if chunk, err := s.Next(); err != nil || !bytes.Contains(chunk, []byte(`"hi"`)) {
			t.Fatalf("%s: first chunk %q, %v", tc.name, chunk, err)
		}
		if got := s.Buffered(); got != tc.want {
			t.Errorf("%s next: Buffered %v, want %v", tc.name, got, tc.want)
		}
	}
}
