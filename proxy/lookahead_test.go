package proxy

import (
	"bytes"
	"strconv"
	"testing"
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
		b.bufferedBody(raw, func(run []byte) bool { got = append(got, run...); return true })
		want := readable(body, at, from, end, sizes)
		if !bytes.Equal(got, want) {
			t.Fatalf("framed %q from %d (left %d), buffered to %d: got %q, want %q", framed, pos, left, end, got, want)
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
