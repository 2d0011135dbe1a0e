package mockllm

import (
	"bufio"
	"net"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestCloseEndsStalledStreams is not parallel: it checks that Close wakes a
// stream stalled for an hour and leaves no goroutine behind.
func TestCloseEndsStalledStreams(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	s := New(Options{Respond: func(*Call) Turn { return Turn{Text: "abcdefgh", Fault: StallFault(1, time.Hour)} }})
	base, err := s.ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", base[len("http://"):len(base)-len("/v1")])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := chatBody("m", true, false, userHi)
	_, _ = c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: m\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body))
	readEvents(t, bufio.NewReader(c), 1)
	t0 := time.Now()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Fatalf("Close took %v", el)
	}
	_ = c.Close()
	goleak.VerifyNone(t, ignore)
}
