package mcpclient

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
)

// readAll reads what jsonLines passes on of in, the source giving at most
// chunk bytes per read and the reader asking for at most ask.
func readAll(t testing.TB, in []byte, chunk, ask int) []byte {
	var src io.Reader = bytes.NewReader(in)
	if chunk == 1 {
		src = iotest.OneByteReader(src)
	} else {
		src = &chunked{b: in, n: chunk}
	}
	j := &jsonLines{r: src}
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

// TestJSONLinesPassesOverLogLines: what a stdio server logs to stdout is
// taken out up to its newline, and nothing of a message is, however the
// bytes arrive and whatever the reader asks for.
func TestJSONLinesPassesOverLogLines(t *testing.T) {
	msg := `{"jsonrpc":"2.0","id":1,"result":{"text":"a line\nwith [brackets] and \"{quotes\"\\"}}`
	batch := `[ {"jsonrpc":"2.0","method":"a"},{"jsonrpc":"2.0","method":"b"}]`
	for _, tc := range []struct{ in, want string }{
		{msg + "\n", msg + "\n"},
		{"Weather server running on stdio\n" + msg + "\n", msg + "\n"},
		{"[dotenv@16.4.5] injecting env (2) from .env\n" + msg + "\n", msg + "\n"},
		{"[info] handling\n\n  [\n" + msg + "\n", "\n  \n" + msg + "\n"},
		{batch + "\n", "[{" + batch[3:] + "\n"},
		{"  " + msg + "\r\n", "  " + msg + "\r\n"},
		// A message written over several lines reaches the SDK whole.
		{"{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 2,\n  \"result\": {}\n}\nlog\n", "{\n  \"jsonrpc\": \"2.0\",\n  \"id\": 2,\n  \"result\": {}\n}\n"},
		// A line that begins like a message goes on as it is.
		{"{not json\nok\n", "{not json\nok\n"},
		{msg + " trailing\nlog line\n", msg + " trailing\n"},
		{"12345\n\"str\"\n", ""},
		{"no newline at the end", ""},
		{"[", ""},
	} {
		// (Reads of one byte are the SDK's at its bound on one message,
		// where a held '[' goes on: FuzzJSONLines.)
		for _, chunk := range []int{1, 2, 3, 7, 4096} {
			for _, ask := range []int{2, 5, 512} {
				if got := readAll(t, []byte(tc.in), chunk, ask); string(got) != tc.want {
					t.Errorf("in %q (chunks of %d, reads of %d):\n got %q\nwant %q", tc.in, chunk, ask, got, tc.want)
				}
			}
		}
	}
}

// FuzzJSONLines: no input makes jsonLines panic or loop, what it passes on
// does not depend on how the bytes arrive (except the one-byte read that
// lets a held '[' go on as a batch's), and it never adds a byte.
func FuzzJSONLines(f *testing.F) {
	for _, s := range []string{
		"log\n{\"id\":1}\n", "[{\"a\":\"]\\\"[\"}]\n", "[x]\n[ \t{}]\n", "{\"s\":\"\\\\\"}\nz\n", "\r\n [\r\n{}\n",
	} {
		f.Add([]byte(s), uint8(3))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		whole := readAll(t, in, len(in)+1, 4096)
		if len(whole) > len(in) {
			t.Fatalf("%d bytes out of %d in", len(whole), len(in))
		}
		if got := readAll(t, in, int(chunk)%16+1, int(chunk)%5+2); !bytes.Equal(got, whole) {
			t.Fatalf("chunks of %d: %q, whole: %q", int(chunk)%16+1, got, whole)
		}
		_ = readAll(t, in, int(chunk)%16+1, 1)
	})
}
