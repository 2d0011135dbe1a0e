package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// streamPair is tcpPair as a stream's connection and its client, the
// server's send buffer and the client's receive buffer shrunk to buf
// bytes when buf > 0 (so that a large write fills the socket and waits).
func streamPair(tb testing.TB, buf int) (server *net.TCPConn, client net.Conn) {
	tb.Helper()
	client, sc := tcpPair(tb)
	server = sc.(*net.TCPConn)
	if buf > 0 {
		_ = client.(*net.TCPConn).SetReadBuffer(buf)
		_ = server.SetWriteBuffer(buf)
	}
	return server, client
}

// TestConnWriterWholeAndInOrder: writes the socket has room for and
// writes that must wait for a slow reader (partial writevs, a write of
// several vectors cut inside one) all arrive whole and in order, through
// one writer reused across writes as a stream's is.
func TestConnWriterWholeAndInOrder(t *testing.T) {
	t.Parallel()
	server, client := streamPair(t, 32<<10)
	var want bytes.Buffer
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(client)
		got <- b
	}()
	var w connWriter
	for i := range 40 {
		head := bytes.Repeat([]byte{'a' + byte(i%26)}, 1+i*37%300)
		body := bytes.Repeat([]byte{'A' + byte(i%26)}, (i%5)*60<<10) // 0 to 240 KiB: several fill the socket
		bufs := net.Buffers{head, nil, body, []byte("\r\n")}
		for _, b := range bufs {
			want.Write(b)
		}
		if err := w.write(server, &bufs, time.Second); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if len(bufs) != 0 {
			t.Fatalf("write %d returned with %d vectors unwritten", i, len(bufs))
		}
	}
	_ = server.CloseWrite()
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("the reader got %d bytes, not the %d written in order", len(b), want.Len())
	}
}

// TestConnWriterPassedDeadline: a write deadline an earlier wait left on
// the connection, now passed, does not fail the next write: it is
// replaced by the write's own.
func TestConnWriterPassedDeadline(t *testing.T) {
	t.Parallel()
	server, client := streamPair(t, 0)
	_ = server.SetWriteDeadline(time.Now().Add(-time.Second))
	var w connWriter
	bufs := net.Buffers{[]byte("data: x\n\n")}
	if err := w.write(server, &bufs, time.Second); err != nil {
		t.Fatalf("a write after a passed deadline failed: %v", err)
	}
	b := make([]byte, 9)
	if _, err := io.ReadFull(client, b); err != nil || string(b) != "data: x\n\n" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// TestConnWriterStoppedReader: a client that reads nothing ends the write
// once a whole timeout passes with nothing acknowledged.
func TestConnWriterStoppedReader(t *testing.T) {
	t.Parallel()
	server, _ := streamPair(t, 8<<10)
	var w connWriter
	start := time.Now()
	bufs := net.Buffers{make([]byte, 4<<20)}
	err := w.write(server, &bufs, 200*time.Millisecond)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a write to a client that reads nothing ended with %v, not its deadline", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("it took %v", d)
	}
}

// TestConnWriterClientGone: a write to a client that closed its end fails
// (the stream then ends as one whose client left) instead of waiting.
func TestConnWriterClientGone(t *testing.T) {
	t.Parallel()
	server, client := streamPair(t, 0)
	_ = client.(*net.TCPConn).SetLinger(0)
	_ = client.Close() // a reset
	time.Sleep(50 * time.Millisecond)
	var w connWriter
	var err error
	for range 3 { // the first write after a close may still be taken
		bufs := net.Buffers{[]byte("data: x\n\n")}
		if err = w.write(server, &bufs, time.Minute); err != nil {
			break
		}
	}
	if err == nil {
		t.Fatal("writes to a client that reset its connection did not fail")
	}
}

// TestConsume: dropping n written bytes leaves the rest of the vectors
// as they were, the written ones (and empty ones before the rest) gone.
func TestConsume(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int
		want string
		left int
	}{{0, "abc|de|f", 4}, {2, "c|de|f", 4}, {3, "de|f", 2}, {4, "e|f", 2}, {6, "", 0}} {
		v := net.Buffers{[]byte("abc"), nil, []byte("de"), []byte("f")}
		consume(&v, c.n)
		var parts [][]byte
		for _, b := range v {
			if len(b) > 0 {
				parts = append(parts, b)
			}
		}
		if got := string(bytes.Join(parts, []byte("|"))); got != c.want || len(v) != c.left {
			t.Errorf("consume %d: %q (%d vectors), want %q (%d)", c.n, got, len(v), c.want, c.left)
		}
	}
}

// BenchmarkConnWrite is one stream write (size line, a 2 KiB burst of
// events, CRLF) to a loopback client that reads everything, with the
// shipped write timeout: the socket always has room, as for nearly every
// write of a stream.
func BenchmarkConnWrite(b *testing.B) {
	server, client := streamPair(b, 0)
	go func() { _, _ = io.Copy(io.Discard, client) }()
	body, size := bytes.Repeat([]byte("x"), 2<<10), []byte("800\r\n")
	var k struct { // a sink's vectors and writer
		vec  [3][]byte
		bufs net.Buffers
		w    connWriter
	}
	b.ReportAllocs()
	for b.Loop() {
		k.vec = [3][]byte{size, body, crlf}
		k.bufs = k.vec[:]
		if err := k.w.write(server, &k.bufs, 30*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}
