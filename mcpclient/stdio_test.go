package mcpclient

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// readAll reads what jsonLines (bound max) passes on of in, the source
// giving at most chunk bytes per read and the reader asking for at most ask.
func readAll(t testing.TB, in []byte, max, chunk, ask int) []byte {
	var src io.Reader = bytes.NewReader(in)
	if chunk == 1 {
		src = iotest.OneByteReader(src)
	} else {
		src = &chunked{b: in, n: chunk}
	}
	j := newJSONLines(src, max)
	var out []byte
	p := make([]byte, ask)
	for reads := 0; ; reads++ {
		if reads > 4*len(in)+8 {
			t.Fatalf("no end after %d reads of %q", reads, in)
		}
		n, err := j.Read(p)
		out = append(out, p[:n]...)
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// chunked gives b at most n bytes per read.
type chunked struct {
	b []byte
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[n:]
	return n, nil
}

// TestJSONLinesPassesOverLogLines: the lines of a stdio server's stdout
// that are not JSON-RPC messages are taken out, and the messages go on,
// however the bytes arrive and whatever the reader asks for; a line over
// the bound goes on as it came, for the SDK to refuse.
func TestJSONLinesPassesOverLogLines(t *testing.T) {
	msg := `{"jsonrpc":"2.0","id":1,"result":{"text":"a line\nwith [brackets] and \"{quotes\"\\"}}`
	batch := `[ {"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]`
	long := `{"jsonrpc":"2.0","id":3,"result":{"text":"` + strings.Repeat("x", 300) + `"}}`
	for _, tc := range []struct{ in, want string }{
		{msg + "\n", msg + "\n"},
		{"Weather server running on stdio\n" + msg + "\n", msg + "\n"},
		{"[dotenv@16.4.5] injecting env (2) from .env\n" + msg + "\n", msg + "\n"},
		{`{"level":"info","time":"2026-12-01T00:00:00Z","msg":"starting"}` + "\n" + msg + "\n", msg + "\n"},
		{"[info] handling\n\n  [\n" + msg, msg + "\n"},
		{batch + "\n", batch + "\n"},
		{"  " + msg + "\r\n", msg + "\n"},
		{"\xef\xbb\xbf" + msg + "\n", msg + "\n"},
		{`{"jsonrpc":"1.0","id":1}` + "\n" + `{"jsonrpc":2,"id":1}` + "\n" + `["a"]` + "\n", ""},
		// One per line, as the spec has them: a message written over
		// several lines is not one (nor is what trails a message).
		{"{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 2,\n  \"result\": {}\n}\n", ""},
		{"{not json\n" + msg + " trailing\n" + msg + "\n", msg + "\n"},
		{"12345\n\"str\"\nProgress 10%\rProgress 20%\r\n", ""},
		{"no newline at the end", ""},
		{long + "\nlog\n" + msg + "\n", long + "\n" + msg + "\n"},
	} {
		for _, chunk := range []int{1, 2, 3, 7, 4096} {
			for _, ask := range []int{1, 2, 5, 512} {
				if got := readAll(t, []byte(tc.in), 1<<20, chunk, ask); string(got) != tc.want {
					t.Errorf("in %q (chunks of %d, reads of %d):\n got %q\nwant %q", tc.in, chunk, ask, got, tc.want)
				}
			}
		}
	}
	// Over the bound: a line that may be a message is passed on as it came
	// (the SDK refuses it as too large), any other is taken out; the lines
	// after it are judged again.
	in := "log\n" + long + "\n" + "progress: " + strings.Repeat("=", 300) + "\n" + strings.Repeat(" ", 300) + "\n" + msg + "\n"
	if got, want := string(readAll(t, []byte(in), 100, 4096, 512)), long+"\n"+msg+"\n"; got != want {
		t.Fatalf("lines over the bound:\n got %q\nwant %q", got, want)
	}
	bigLog := "[debug] " + strings.Repeat("z", 3*lineBuffer) + "\n"
	if got := readAll(t, []byte(bigLog+msg+"\n"), 2*lineBuffer, 4096, 512); string(got) != msg+"\n" {
		t.Fatalf("a log line over the bound and the reader's buffer: %d bytes passed on", len(got))
	}
	if n, err := newJSONLines(strings.NewReader(msg+"\n"), 1<<20).Read(nil); n != 0 || err != nil {
		t.Fatalf("an empty read: %d, %v", n, err)
	}
	huge := ` [ {"jsonrpc":"2.0","id":9,"result":"` + strings.Repeat("y", 3*lineBuffer) + `"}]`
	j := newJSONLines(strings.NewReader(huge+"\n"+msg+"\n"), 2*lineBuffer)
	got, err := io.ReadAll(j)
	if err != nil || string(got) != huge+"\n"+msg+"\n" {
		t.Fatalf("a line over the bound and the reader's buffer: %d bytes, %v", len(got), err)
	}
	if cap(j.line) > keptLine || j.out != nil {
		t.Errorf("%d and %d bytes kept after a long line", cap(j.line), cap(j.out))
	}
}

// FuzzJSONLines: no input makes jsonLines panic or loop; it passes on
// exactly the input's lines that are JSON-RPC messages, trimmed, however
// the bytes arrive.
func FuzzJSONLines(f *testing.F) {
	for _, s := range []string{
		"log\n{\"jsonrpc\":\"2.0\",\"id\":1}\n", "[{\"jsonrpc\":\"2.0\",\"a\":\"]\\\"[\"}]\n", "[x]\n[ \t{}]\n",
		"{\"s\":\"\\\\\"}\nz\n", "\r\n [\r\n{}\n", "\xef\xbb\xbf{\"jsonrpc\":\"2.0\"}\r\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		var want []byte
		for line := range bytes.SplitAfterSeq(in, []byte("\n")) {
			if m := message(bytes.Clone(line)); m != nil {
				want = append(append(want, m...), '\n')
			}
		}
		if got := readAll(t, in, 1<<20, len(in)+1, 4096); !bytes.Equal(got, want) {
			t.Fatalf("whole: %q, want %q", got, want)
		}
		if got := readAll(t, in, 1<<20, int(chunk)%16+1, int(chunk)%5+1); !bytes.Equal(got, want) {
			t.Fatalf("chunks of %d: %q, want %q", int(chunk)%16+1, got, want)
		}
	})
}
