package proxy

import (
	"bytes"
	"strings"
	"testing"

	"github.com/llmgw/gateway/observe"
)

// An event line past maxEventBytes goes out once it passes the bound and
// then as it comes (not held up to the bound again), whole and with a
// secret in it masked; its buffer is let go after it, not kept for the
// rest of the stream, and the line after it is held whole again.
func TestLineMaskerLongLine(t *testing.T) {
	t.Parallel()
	const secret = "sk-long-line-mask-secret-7a1"
	observe.Secrets.Add(secret)
	read := bytes.Repeat([]byte("y"), 64<<10)
	var in, out bytes.Buffer
	m := &lineMasker{}
	feed := func(p []byte) (held int) {
		in.Write(p)
		got, n := m.lines(p, false)
		out.Write(got)
		m.drop(n)
		return len(m.held)
	}
	feed([]byte(`data: {"x":"`))
	past := false
	for i := 0; i < 3*maxEventBytes/len(read); i++ {
		held := feed(read)
		if past && held > len(read) {
			t.Fatalf("read %d: %d bytes held after the line passed the bound", i, held)
		}
		past = past || out.Len() > 0
		if i == maxEventBytes/len(read)+2 {
			feed([]byte("a " + secret[:9]))
			feed([]byte(secret[9:] + " b"))
		}
	}
	if c := cap(m.held); c > maxEventBytes+len(read) {
		t.Errorf("held a capacity of %d for a line read %d bytes at a time", c, len(read))
	}
	feed([]byte("\"}\n\ndata: {\"short\":1}"))
	if c := cap(m.held); c > keptHeld {
		t.Errorf("kept a capacity of %d after the long line", c)
	}
	if got := out.String(); !strings.HasSuffix(got, "\"}\n\n") || strings.Contains(got, "short") {
		t.Errorf("the long line's end, or the next line, went out wrong: %q", got[max(0, len(got)-40):])
	}
	rest, n := m.lines(nil, true)
	out.Write(rest)
	m.drop(n)
	want := strings.ReplaceAll(in.String(), secret, observe.Mask)
	if out.String() != want {
		t.Errorf("out differs from the input masked (%d bytes, want %d); secret left: %v", out.Len(), len(want), strings.Contains(out.String(), secret))
	}
}

// The read that takes a line past maxEventBytes may also end it and begin
// the next event: that event is held whole as any other (here an error
// about the provider's key, which is rewritten whole), not sent on in
// pieces as if it were the long line.
func TestLineMaskerEventAfterLongLine(t *testing.T) {
	t.Parallel()
	m := &lineMasker{}
	var out bytes.Buffer
	feed := func(p []byte, end bool) {
		got, n := m.lines(p, end)
		out.Write(got)
		m.drop(n)
	}
	feed([]byte(`data: {"x":"`), false)
	read := bytes.Repeat([]byte("y"), 32<<10)
	for len(m.held)+len(read) <= maxEventBytes {
		feed(read, false)
	}
	const leak = "Incorrect API key provided: sk-proj-****abcd"
	ev := `data: {"error":{"message":"` + leak + `","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`
	feed(append(append([]byte{}, read...), "\"}\n\n"+ev[:40]...), false)
	if m.long {
		t.Error("the event after the long line is taken for part of it")
	}
	feed([]byte(ev[40:60]), false)
	feed([]byte(ev[60:]+"\n\n"), false)
	feed(nil, true)
	got := out.String()
	if strings.Contains(got, "abcd") || !strings.Contains(got, credentialsMessage) {
		t.Errorf("the error event went out as the provider wrote it: %q", got[strings.LastIndex(got, "\"}\n\n"):])
	}
}
