package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// FuzzReader checks that the Reader never panics, never returns '\r' in data,
// and yields the same events and final error however the input is split.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"data: {\"a\":1}\n\ndata: [DONE]\n\n",
		"data: a\r\n\r\ndata: b\r\rdata: c\n\n",
		": keep-alive\n\nevent: error\ndata: {\"error\":{}}\n\n",
		"event: ping\n\nid: 1\nretry: 2\ndata\n\n",
		"data: a\ndata:b\n\ndata: cut",
		"\xEF\xBB\xBFdata: é世🎉\n\n",
		"data: \xff\xfe\r",
		"data: " + strings.Repeat("x", 5000) + "\r" + strings.Repeat("y", 3000) + "\n\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, piece uint8) {
		const limit = 256
		wr := NewReader(bytes.NewReader(in), limit)
		whole, werr := readAll(wr)
		// The stray line is the same however the input is cut into reads,
		// none once an event came, and bounded.
		if len(whole) > 0 && wr.Stray() != nil || len(wr.Stray()) > maxStray {
			t.Fatalf("stray %q after %d events", wr.Stray(), len(whole))
		}
		if or := NewReader(iotest.OneByteReader(bytes.NewReader(in)), limit); func() bool { _, _ = readAll(or); return string(or.Stray()) != string(wr.Stray()) }() {
			t.Fatalf("stray %q read byte by byte, %q whole", or.Stray(), wr.Stray())
		}
		for _, e := range whole {
			if bytes.IndexByte([]byte(e.data), '\r') >= 0 || bytes.IndexByte([]byte(e.name), '\r') >= 0 {
				t.Fatalf("event contains \\r: %q", e)
			}
		}
		one, oerr := readAll(NewReader(iotest.OneByteReader(bytes.NewReader(in)), limit))
		if !errors.Is(oerr, werr) && !errors.Is(werr, oerr) {
			t.Fatalf("one-byte err %v, whole err %v", oerr, werr)
		}
		if fmt.Sprint(one) != fmt.Sprint(whole) {
			t.Fatalf("one-byte events %q, whole %q", one, whole)
		}
		sizes := []int{int(piece%17) + 1, 1, int(piece%5) + 2}
		pieces, perr := readAll(NewReader(&pieceReader{b: in, sizes: sizes}, limit))
		if !errors.Is(perr, werr) || fmt.Sprint(pieces) != fmt.Sprint(whole) {
			t.Fatalf("pieces %q, %v; whole %q, %v", pieces, perr, whole, werr)
		}
		if werr != io.EOF && werr != io.ErrUnexpectedEOF && werr != ErrEventTooLarge {
			t.Fatalf("unexpected error %v", werr)
		}
		// A limit past the initial buffer: a long line grows it, and its
		// search resumes where the last read left it (Reader.scanned).
		big, berr := readAll(NewReader(bytes.NewReader(in), 8<<10))
		bigPieces, bperr := readAll(NewReader(&pieceReader{b: in, sizes: sizes}, 8<<10))
		if !errors.Is(bperr, berr) || fmt.Sprint(bigPieces) != fmt.Sprint(big) {
			t.Fatalf("limit 8 KiB: pieces %q, %v; whole %q, %v", bigPieces, bperr, big, berr)
		}
	})
}

// FuzzRoundTrip checks that single-line payloads framed by the append
// functions read back unchanged.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte(`{"a":1}`), []byte(" leading space"), []byte("keep-alive"))
	f.Add([]byte(""), []byte("[DONE]"), []byte(""))
	f.Add([]byte("data: nested"), []byte(":colon"), []byte("é世🎉\xff"))
	f.Fuzz(func(t *testing.T, a, b, comment []byte) {
		// Strip line breaks bytewise: payloads may be invalid UTF-8.
		strip := func(p []byte) []byte {
			out := make([]byte, 0, len(p))
			for _, c := range p {
				if c != '\n' && c != '\r' {
					out = append(out, c)
				}
			}
			return out
		}
		a, b, comment = strip(a), strip(b), strip(comment)
		var s []byte
		s = AppendData(s, a)
		s = AppendComment(s, comment)
		s = AppendError(s, b)
		s = append(s, Done...)
		rd := NewReader(bytes.NewReader(s), 0)
		e, err := rd.Next()
		if err != nil || e.Name != nil || !bytes.Equal(e.Data, a) {
			t.Fatalf("first = %q %q, %v; want %q", e.Name, e.Data, err, a)
		}
		e, err = rd.Next()
		if err != nil || string(e.Name) != "error" || !bytes.Equal(e.Data, b) {
			t.Fatalf("second = %q %q, %v; want %q", e.Name, e.Data, err, b)
		}
		e, err = rd.Next()
		if err != nil || !IsDone(e.Data) {
			t.Fatalf("third = %q, %v", e.Data, err)
		}
		if _, err := rd.Next(); err != io.EOF {
			t.Fatalf("end err = %v", err)
		}
	})
}
