package proxy

import (
	"bufio"
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/sse"
)

// gateConn is the network under an upstream connection, for a trackedConn
// that reads ahead: the response's bytes arrive in the given pieces. A
// Read takes what has arrived, and waits for the next piece only when
// nothing has (a wait with the gate closed is recorded); readNow takes
// what has arrived and never waits.
type gateConn struct {
	net.Conn // nil: only the methods below are used
	data     []byte
	pos      int // read so far
	arrived  int // in the socket so far
	pieces   []int
	pi       int
	open     bool
	violated bool
}

func (g *gateConn) arrive() {
	n := len(g.data) - g.arrived
	if len(g.pieces) > 0 {
		n = min(n, g.pieces[g.pi%len(g.pieces)])
		g.pi++
	}
	g.arrived += n
}

func (g *gateConn) Read(p []byte) (int, error) {
	if g.pos == g.arrived {
		if g.pos >= len(g.data) {
			return 0, errGateClosed // nothing more: a real read would wait
		}
		if !g.open {
			g.violated = true
			return 0, errGateClosed
		}
		g.arrive()
	}
	n := copy(p, g.data[g.pos:g.arrived])
	g.pos += n
	return n, nil
}

func (g *gateConn) readNow(p []byte) (int, error) {
	n := copy(p, g.data[g.pos:g.arrived])
	g.pos += n
	return n, nil
}

func (g *gateConn) SetReadDeadline(time.Time) error { return nil }

// gateStream reads the response data through a trackedConn over g, with
// a reader buffer of bufSize, as an upstream stream.
func gateStream(t *testing.T, g *gateConn, bufSize int, readAhead bool) *upstreamStream {
	tc := &trackedConn{Conn: g, table: &connTable{}}
	if readAhead {
		tc.readNow = g.readNow
	}
	resp := &fasthttp.Response{StreamBody: true}
	if err := resp.Read(bufio.NewReaderSize(tc, bufSize)); err != nil {
		return nil
	}
	rs := resp.BodyStream()
	return &upstreamStream{ctx: context.Background(), pc: &providerClient{}, rd: sse.NewReader(rs, 256), body: gateBodyReader(rs), model: "m", conn: tc}
}

// FuzzReadAheadNeverWaits: with the upstream connection reading ahead of
// fasthttp's reader (whatever the bytes, framing, pieces, what has arrived
// and when more arrives, and the reader's buffer size), when Buffered says
// true the next Next waits for nothing, and once AllHere says true no Next
// ever does; and the chunks come out as they do from the same bytes read
// without a gate or a read-ahead, in order.
func FuzzReadAheadNeverWaits(f *testing.F) {
	f.Add([]byte{0, 2, 2, 1, 4, 4}, []byte{5, 3, 40}, []byte{3, 7}, []byte{1, 0}, byte(0), byte(0), byte(3))
	f.Add([]byte{0, 4, 4, 0, 4, 4, 6, 4, 4}, []byte{200, 70, 9}, []byte{60}, []byte{0}, byte(0), byte(10), byte(1))
	f.Add([]byte{12, 13, 12, 13, 12, 13, 6, 13}, []byte{}, []byte{64, 64, 64}, []byte{1}, byte(0), byte(0), byte(2))
	f.Add([]byte{0, 13, 1, 13, 6, 13}, []byte{}, []byte{64}, []byte{}, byte(2), byte(40), byte(0))
	f.Fuzz(func(t *testing.T, toks, sizes, pieces, ticks []byte, mode, bufSize, burst byte) {
		var body []byte
		for _, c := range toks {
			body = append(body, gateTokens[int(c)%len(gateTokens)]...)
		}
		if len(body) == 0 {
			return
		}
		data := gateResponse(body, sizes, mode)
		size := 16 + int(bufSize)

		// The same bytes, all here, read without a read-ahead.
		ref := &gateConn{data: data, arrived: len(data), open: true}
		rs := gateStream(t, ref, size, false)
		if rs == nil {
			return
		}
		var want [][]byte
		var wantErr error
		for range 1000 {
			chunk, err := rs.Next()
			if err != nil {
				wantErr = err
				break
			}
			want = append(want, bytes.Clone(chunk))
		}

		g := &gateConn{data: data}
		for _, p := range pieces {
			g.pieces = append(g.pieces, int(p%64)+1)
		}
		for range 1 + int(burst%8) { // a burst already in the socket
			g.arrive()
		}
		g.open = true // the head is read before any lookahead
		s := gateStream(t, g, size, true)
		if s == nil {
			t.Fatalf("the response head did not read through the gate: %q", data)
		}
		allHere := false
		for step := 0; ; step++ {
			if len(ticks) > 0 && ticks[step%len(ticks)]&1 == 1 {
				g.arrive() // the upstream sends more meanwhile
			}
			g.open = false
			allHere = allHere || s.AllHere()
			g.open = !allHere && !s.Buffered()
			chunk, err := s.Next()
			if g.violated {
				t.Fatalf("a Next waited for the network after Buffered or AllHere said it would not (step %d, mode %d): %q, at %d", step, mode%4, g.data, g.pos)
			}
			if err != nil {
				if step != len(want) || err.Error() != wantErr.Error() {
					t.Fatalf("ended at step %d with %v; read without the gate: %d chunks, then %v", step, err, len(want), wantErr)
				}
				return
			}
			if step >= len(want) || !bytes.Equal(chunk, want[step]) {
				t.Fatalf("chunk %d %q differs from the one read without the gate", step, chunk)
			}
		}
	})
}
