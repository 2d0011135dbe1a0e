package sse

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// ev is a copied event for comparisons; name "-" means no event: line.
type ev struct{ name, data string }

// readAll drains rd, copying every event, and returns the final error.
func readAll(rd *Reader) ([]ev, error) {
	var out []ev
	for {
		e, err := rd.Next()
		if err != nil {
			return out, err
		}
		name := "-"
		if e.Name != nil {
			name = string(e.Name)
		}
		out = append(out, ev{name, string(e.Data)})
	}
}

// pieceReader returns its input in pieces of the given sizes (cycling).
type pieceReader struct {
	b     []byte
	sizes []int
	i     int
}

func (p *pieceReader) Read(dst []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, io.EOF
	}
	n := p.sizes[p.i%len(p.sizes)]
	p.i++
	n = min(n, len(dst), len(p.b))
	copy(dst, p.b[:n])
	p.b = p.b[n:]
	return n, nil
}

func TestReader(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		max     int
		want    []ev
		wantErr error
	}{
		{name: "empty", in: "", wantErr: io.EOF},
		{name: "one event LF", in: "data: {\"a\":1}\n\n", want: []ev{{"-", `{"a":1}`}}, wantErr: io.EOF},
		{name: "CRLF", in: "data: a\r\n\r\ndata: b\r\n\r\n", want: []ev{{"-", "a"}, {"-", "b"}}, wantErr: io.EOF},
		{name: "lone CR", in: "data: a\r\rdata: b\r\r", want: []ev{{"-", "a"}, {"-", "b"}}, wantErr: io.EOF},
		{name: "mixed endings", in: "data: a\r\ndata: b\rdata: c\n\r\n", want: []ev{{"-", "a\nb\nc"}}, wantErr: io.EOF},
		{name: "no space after colon", in: "data:x\n\n", want: []ev{{"-", "x"}}, wantErr: io.EOF},
		{name: "only one space stripped", in: "data:  x \n\n", want: []ev{{"-", " x "}}, wantErr: io.EOF},
		{name: "comments skipped", in: ": keep-alive\n\n:x\ndata: a\n: mid\n\n", want: []ev{{"-", "a"}}, wantErr: io.EOF},
		{name: "id and retry ignored", in: "id: 7\nretry: 100\ndata: a\n\n", want: []ev{{"-", "a"}}, wantErr: io.EOF},
		{name: "event without data skipped", in: "event: ping\n\nid: 1\n\nretry: 5\n\ndata: a\n\n", want: []ev{{"-", "a"}}, wantErr: io.EOF},
		{name: "multiple data joined", in: "data: a\ndata:\ndata: c\n\n", want: []ev{{"-", "a\n\nc"}}, wantErr: io.EOF},
		{name: "empty data dispatched", in: "data:\n\n", want: []ev{{"-", ""}}, wantErr: io.EOF},
		{name: "field without colon", in: "data\n\n", want: []ev{{"-", ""}}, wantErr: io.EOF},
		{name: "unknown field ignored", in: "foo: bar\ndata: a\n\n", want: []ev{{"-", "a"}}, wantErr: io.EOF},
		{name: "event name", in: "event: error\ndata: {\"error\":{}}\n\ndata: b\n\n", want: []ev{{"error", `{"error":{}}`}, {"-", "b"}}, wantErr: io.EOF},
		{name: "last event name wins", in: "event: a\nevent: b\ndata: x\n\n", want: []ev{{"b", "x"}}, wantErr: io.EOF},
		{name: "name does not leak", in: "event: a\n\ndata: x\n\n", want: []ev{{"-", "x"}}, wantErr: io.EOF},
		{name: "BOM dropped", in: "\xEF\xBB\xBFdata: a\n\n", want: []ev{{"-", "a"}}, wantErr: io.EOF},
		{name: "extra blank lines", in: "\n\n\ndata: a\n\n\n\n", want: []ev{{"-", "a"}}, wantErr: io.EOF},
		{name: "done", in: "data: a\n\ndata: [DONE]\n\n", want: []ev{{"-", "a"}, {"-", "[DONE]"}}, wantErr: io.EOF},
		{name: "cut after data line", in: "data: a\n\ndata: b\n", want: []ev{{"-", "a"}}, wantErr: io.ErrUnexpectedEOF},
		{name: "cut mid line", in: "data: a\n\ndata: {\"x", want: []ev{{"-", "a"}}, wantErr: io.ErrUnexpectedEOF},
		{name: "cut after comment", in: "data: a\n\n: ping\n", want: []ev{{"-", "a"}}, wantErr: io.ErrUnexpectedEOF},
		{name: "utf8 kept", in: "data: {\"c\":\"héllo 世界 🎉\"}\n\n", want: []ev{{"-", `{"c":"héllo 世界 🎉"}`}}, wantErr: io.EOF},
		{name: "too large one line", in: "data: " + strings.Repeat("x", 100) + "\n\n", max: 50, wantErr: ErrEventTooLarge},
		{name: "too large many lines", in: strings.Repeat("data: xxxxxxxxxx\n", 10) + "\n", max: 50, wantErr: ErrEventTooLarge},
		{name: "at limit", in: "data: " + strings.Repeat("x", 44) + "\n\n", max: 50, want: []ev{{"-", strings.Repeat("x", 44)}}, wantErr: io.EOF},
		{name: "limit per event", in: strings.Repeat("data: "+strings.Repeat("x", 40)+"\n\n", 5), max: 50,
			want: []ev{{"-", strings.Repeat("x", 40)}, {"-", strings.Repeat("x", 40)}, {"-", strings.Repeat("x", 40)}, {"-", strings.Repeat("x", 40)}, {"-", strings.Repeat("x", 40)}}, wantErr: io.EOF},
		{name: "many comments do not add up", in: strings.Repeat(": keep-alive-keep-alive\n", 10) + "data: a\n\n", max: 50, want: []ev{{"-", "a"}}, wantErr: io.EOF},
		{name: "one long comment too large", in: ": " + strings.Repeat("z", 60) + "\n\ndata: a\n\n", max: 50, wantErr: ErrEventTooLarge},
		{name: "long line under big limit", in: "data: " + strings.Repeat("y", 100000) + "\n\n", want: []ev{{"-", strings.Repeat("y", 100000)}}, wantErr: io.EOF},
	}
	readers := map[string]func(string) io.Reader{
		"whole":   func(s string) io.Reader { return strings.NewReader(s) },
		"onebyte": func(s string) io.Reader { return iotest.OneByteReader(strings.NewReader(s)) },
		"pieces":  func(s string) io.Reader { return &pieceReader{b: []byte(s), sizes: []int{3, 1, 7, 2, 13}} },
		"dataerr": func(s string) io.Reader { return iotest.DataErrReader(strings.NewReader(s)) },
	}
	for _, tt := range tests {
		for rname, mk := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				t.Parallel()
				got, err := readAll(NewReader(mk(tt.in), tt.max))
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if fmt.Sprint(got) != fmt.Sprint(tt.want) {
					t.Fatalf("events = %q, want %q", got, tt.want)
				}
			})
		}
	}
}

func TestReaderLoneCRDispatchesWithoutNextByte(t *testing.T) {
	t.Parallel()
	// The writer blocks after "data: a\r\r": the event must come out anyway.
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("data: a\r\r")) }()
	rd := NewReader(pr, 0)
	e, err := rd.Next()
	if err != nil || string(e.Data) != "a" {
		t.Fatalf("Next = %q, %v", e.Data, err)
	}
	go func() { _, _ = pw.Write([]byte("\ndata: b\n\n")) }()
	// The '\n' after the second '\r' is part of a "\r\n" terminator, not a blank line.
	e, err = rd.Next()
	if err != nil || string(e.Data) != "b" {
		t.Fatalf("Next = %q, %v", e.Data, err)
	}
}

func TestReaderStickyAndReadError(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	rd := NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)), 0)
	if e, err := rd.Next(); err != nil || string(e.Data) != "a" {
		t.Fatalf("first = %q, %v", e.Data, err)
	}
	for range 2 {
		if _, err := rd.Next(); !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
	}
}

func TestReaderReset(t *testing.T) {
	t.Parallel()
	rd := NewReader(strings.NewReader("data: a\n"), 0)
	if _, err := rd.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v", err)
	}
	rd.Reset(strings.NewReader("data: b\n\n"))
	got, err := readAll(rd)
	if err != io.EOF || len(got) != 1 || got[0].data != "b" {
		t.Fatalf("after reset: %q, %v", got, err)
	}
}

func TestIsDone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want bool
	}{
		{"exact", "[DONE]", true},
		{"trailing space", "[DONE] ", false},
		{"prefix", "[DONE]x", false},
		{"lower", "[done]", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := IsDone([]byte(tt.in)); got != tt.want {
				t.Fatalf("IsDone(%q) = %v", tt.in, got)
			}
		})
	}
}

// chunkStream builds n events of a typical ~200-byte chat chunk.
func chunkStream(n int) []byte {
	chunk := `{"id":"chatcmpl-gw1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-x","choices":[{"index":0,"delta":{"content":"Hello there"},"logprobs":null,"finish_reason":null}],"usage":null}`
	var b []byte
	for range n {
		b = AppendData(b, []byte(chunk))
	}
	return append(b, Done...)
}

func TestReaderZeroAllocSteadyState(t *testing.T) {
	stream := chunkStream(100)
	br := bytes.NewReader(stream)
	rd := NewReader(br, 0)
	if _, err := readAll(rd); err != io.EOF { // warm the buffers
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(20, func() {
		br.Reset(stream)
		rd.Reset(br)
		for {
			if _, err := rd.Next(); err != nil {
				break
			}
		}
	})
	if allocs != 0 {
		t.Fatalf("allocs per stream = %v, want 0", allocs)
	}
}

func BenchmarkReader(b *testing.B) {
	stream := chunkStream(100)
	br := bytes.NewReader(stream)
	rd := NewReader(br, 0)
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for b.Loop() {
		br.Reset(stream)
		rd.Reset(br)
		for {
			if _, err := rd.Next(); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*101), "ns/event")
}

// isJSONData reports whether the first complete event in b has a data
// line holding a JSON object (FirstData's value starts with "{").
func isJSONData(b []byte) bool {
	v, ok := FirstData(b)
	return ok && len(v) > 0 && v[0] == '{'
}

// TestFirstData: only a complete first event with a JSON data line
// has a JSON value; FirstHasData takes any complete first event with a
// data line.
func TestFirstData(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in           string
		isData, data bool
	}{
		{"data: {\"a\":1}\n\n", true, true},
		{"data:{}\r\n\r\n", true, true},
		{"event: x\ndata: {}\n\n", true, true},
		{"1a\r\ndata: {}\n\n\r\n", true, true}, // a chunk-size line before it
		{": keep-alive\n\ndata: {}\n\n", false, false},
		{"data:\n\ndata: {}\n\n", false, true},
		{"data: [DONE]\n\n", false, true},
		{"data: {\"a\":", false, false}, // not complete
		{"data: {}\n", false, false},
		{"data: [DONE]\n", false, false},
		{"", false, false},
	} {
		if got := isJSONData([]byte(c.in)); got != c.isData {
			t.Errorf("FirstData(%q) holds a JSON object: %v, want %v", c.in, got, c.isData)
		}
		if got := FirstHasData([]byte(c.in)); got != c.data {
			t.Errorf("FirstHasData(%q) = %v, want %v", c.in, got, c.data)
		}
	}
}

// TestStartsData: only the start of a JSON data event, not yet complete,
// counts.
func TestStartsData(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want bool
	}{
		{"data: {\"a\":", true},
		{"data:{", true},
		{"data: {\"a\":1}\n", true}, // the blank line is still to come
		{"data: {}\n\n", false},     // complete: FirstData's case
		{"data: {}\n\ndata: {\"b\"", false},
		{"data: [DO", false},
		{"data: ", false},
		{"da", false},
		{": keep-alive\n", false},
		{"event: x\ndata: {", false},
		{"", false},
	} {
		if got := StartsData([]byte(c.in)); got != c.want {
			t.Errorf("StartsData(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// FuzzFirstData: never panics, and says true only when the bytes hold a
// data line starting with "{" and a blank line, and a Reader given those
// bytes returns an event with that data without reading more; so does
// FirstHasData for any data (the upstream stream leaves its read deadline
// as it is then).
func FuzzFirstData(f *testing.F) {
	for _, s := range []string{"data: {}\n\n", ": x\n\n", "data: [DONE]\n\n", "\r\r", "data:{\r\n\r\n", "event: e\r\ndata: {\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := lineEnd(b), bytes.IndexAny(b, "\r\n"); got != want {
			t.Fatalf("lineEnd(%q) = %d, want %d", b, got, want)
		}
		if StartsData(b) && (HasEvent(b) || FirstHasData(b) || !bytes.HasPrefix(b, []byte("data:"))) {
			t.Fatalf("StartsData(%q) for a complete event or one not starting with data", b)
		}
		isData, hasData := isJSONData(b), FirstHasData(b)
		if isData && !hasData {
			t.Fatalf("a JSON value from FirstData but not FirstHasData for %q", b)
		}
		if !hasData {
			return
		}
		if !HasEvent(b) || !bytes.Contains(b, []byte("data:")) {
			t.Fatalf("true for %q", b)
		}
		rd := NewReader(io.MultiReader(bytes.NewReader(b), iotest.ErrReader(errors.New("read more"))), 0)
		ev, err := rd.Next()
		if err != nil || (isData && !bytes.Contains(ev.Data, []byte("{"))) {
			t.Fatalf("true for %q, whose first event is %q, %v", b, ev.Data, err)
		}
	})
}

// TestRetainedAcrossReset: a Reader keeps its buffers across Reset, and
// Retained counts them, so that a pool can refuse one that grew large; a
// grown input buffer is let go once a read finds nothing pending.
func TestRetainedAcrossReset(t *testing.T) {
	t.Parallel()
	rd := NewReader(strings.NewReader("data: "+strings.Repeat("x", 10000)+"\n\n"), 0)
	if rd.Retained() != 0 {
		t.Fatalf("a new Reader retains %d bytes", rd.Retained())
	}
	if _, err := rd.Next(); err != nil {
		t.Fatal(err)
	}
	n := rd.Retained()
	if n < 10000 { // the line's buffer (its data stays there: one line, no copy)
		t.Fatalf("%d bytes retained after a 10000-byte event", n)
	}
	rd.Reset(strings.NewReader("data: {}\n\n"))
	if rd.Retained() != n {
		t.Fatalf("after Reset: %d bytes retained (was %d)", rd.Retained(), n)
	}
	if ev, err := rd.Next(); err != nil || string(ev.Data) != "{}" || rd.Retained() > initialBufSize {
		t.Fatalf("the next event: %q, %v, %d bytes retained (was %d)", ev.Data, err, rd.Retained(), n)
	}
}

// TestIdleHoldsNoBuffer: a Reader waiting for input with nothing pending
// holds no input buffer; an open stream spends most of its life there.
func TestIdleHoldsNoBuffer(t *testing.T) {
	t.Parallel()
	event := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("y", 300) + "\"}}]}\n\n"
	src := &heldProbe{chunks: []string{event, event, event}}
	rd := NewReader(src, 0)
	src.rd = rd
	for i := range 3 {
		ev, err := rd.Next()
		if err != nil || !strings.Contains(string(ev.Data), strings.Repeat("y", 300)) {
			t.Fatalf("event %d: %q, %v", i, ev.Data, err)
		}
	}
	if _, err := rd.Next(); err != io.EOF {
		t.Fatalf("after the events: %v", err)
	}
	// Each event's first read, and the one that found the end, come with
	// nothing pending: none of them may hold a buffer.
	if src.bare != 4 {
		t.Fatalf("%d of %d reads were made without a buffer held, want 4", src.bare, src.reads)
	}
}

// heldProbe is an input of chunks, each read whole or in pieces; it counts
// the reads made while its Reader held no input buffer.
type heldProbe struct {
	rd          *Reader
	chunks      []string
	reads, bare int
}

func (p *heldProbe) Read(b []byte) (int, error) {
	p.reads++
	if p.rd.buf == nil {
		p.bare++
	}
	if len(p.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(b, p.chunks[0])
	if p.chunks[0] = p.chunks[0][n:]; p.chunks[0] == "" {
		p.chunks = p.chunks[1:]
	}
	return n, nil
}

// TestEndsWithDone: the terminator counts only as a whole event of its own,
// last in the input.
func TestEndsWithDone(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want bool
	}{
		{"data: [DONE]\n\n", true},
		{"data:[DONE]\r\n\r\n", true},
		{"data: {}\n\ndata: [DONE]\n\n", true},
		{"data: {}\r\n\r\ndata: [DONE]\r\n\r\n", true},
		{"data: {}\r\rdata: [DONE]\r\r", true},
		{"data: [DONE]\n", false},                   // its blank line still to come
		{"data: [DONE]\n\ndata: {}\n\n", false},     // an event after it
		{"data: {}\ndata: [DONE]\n\n", false},       // a second data line of one event
		{"data: {}\r\ndata: [DONE]\r\n\r\n", false}, // the same with CRLF
		{"data: [DONE] \n\n", false},
		{"data: {\"a\":\"data: [DONE]\"}\n\n", false},
		{"", false},
	} {
		if got := EndsWithDone([]byte(c.in)); got != c.want {
			t.Errorf("EndsWithDone(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}

// FuzzEndsWithDone: never panics, and says true only when a Reader given
// the bytes returns [DONE] as its last event without reading more.
func FuzzEndsWithDone(f *testing.F) {
	for _, s := range []string{"data: [DONE]\n\n", "data: {}\ndata: [DONE]\n\n", "x\r\r\ndata:[DONE]\r\n\r\n", "\rdata: [DONE]\n\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !EndsWithDone(b) {
			return
		}
		rd := NewReader(io.MultiReader(bytes.NewReader(b), iotest.ErrReader(errors.New("read more"))), 0)
		var last []byte
		for {
			ev, err := rd.Next()
			if err != nil {
				if !IsDone(last) || len(rd.Buffered()) != 0 {
					t.Fatalf("true for %q, whose last event is %q (%v)", b, last, err)
				}
				return
			}
			last = append(last[:0], ev.Data...)
			if IsDone(last) && len(rd.Buffered()) == 0 {
				return // the Reader had no more bytes: [DONE] was last
			}
		}
	})
}

// Stray keeps the first line that is no SSE at all, while no event has
// come: what a server sent instead of a stream (an error object, a page).
// Known fields, comments and blank lines are not stray; once an event
// came, there is none.
func TestReaderStray(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{
		{`{"error":{"message":"overloaded"}}`, `{"error":{"message":"overloaded"}}`},
		{"<html>\n<body>502</body>\n", "<html>"},
		{": ping\nid: 1\nretry: 10\n\n{\"error\":1}\n", `{"error":1}`},
		{"data: {}\n\n{\"error\":1}\n", ""},
		{"data: {}\n\n", ""},
		{"", ""},
	} {
		rd := NewReader(strings.NewReader(c.in), 0)
		var err error
		for err == nil {
			_, err = rd.Next()
		}
		if got := string(rd.Stray()); got != c.want {
			t.Errorf("%q: stray %q, want %q", c.in, got, c.want)
		}
	}
	long := strings.Repeat("x", 3*maxStray)
	rd := NewReader(strings.NewReader(long+"\n"), 0)
	_, _ = rd.Next()
	if len(rd.Stray()) != maxStray {
		t.Errorf("a long stray line kept %d bytes", len(rd.Stray()))
	}
	rd.Reset(strings.NewReader("data: x\n\n"))
	if rd.Stray() != nil {
		t.Error("Reset kept the stray line")
	}
}

// chunked reads r at most n bytes at a time, as a socket delivers a long
// event.
type chunked struct {
	r io.Reader
	n int
}

func (c chunked) Read(p []byte) (int, error) { return c.r.Read(p[:min(len(p), c.n)]) }

// BenchmarkLongLine reads one event whose data line is 1 MiB and 4 MiB,
// 4 KiB a read. The line was searched from its start after every read, so
// its cost grew with its square: 10.5 ms and 125 ms; now 3.2 ms and 10.3 ms
// (one run, this 2-core machine).
func BenchmarkLongLine(b *testing.B) {
	for _, size := range []int{1 << 20, 4 << 20} {
		event := []byte("data: " + strings.Repeat("x", size) + "\n\n")
		b.Run(strconv.Itoa(size>>20)+"MiB", func(b *testing.B) {
			b.SetBytes(int64(len(event)))
			b.ReportAllocs()
			for b.Loop() {
				rd := NewReader(chunked{bytes.NewReader(event), 4096}, 8<<20)
				if ev, err := rd.Next(); err != nil || len(ev.Data) != size {
					b.Fatal(err)
				}
			}
		})
	}
}

// A line that arrives in many reads is found whole, with its terminator
// anywhere: a CR, an LF or CRLF split across reads.
func TestLongLineAcrossReads(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"\n\n", "\r\r", "\r\n\r\n"} {
		for _, n := range []int{1, 7, 4096} {
			in := "data: " + strings.Repeat("y", 20000) + end + "data: z" + end
			rd := NewReader(chunked{strings.NewReader(in), n}, 1<<20)
			a, err := rd.Next()
			if err != nil || len(a.Data) != 20000 {
				t.Fatalf("end %q, reads of %d: %d bytes, %v", end, n, len(a.Data), err)
			}
			if b, err := rd.Next(); err != nil || string(b.Data) != "z" {
				t.Fatalf("end %q, reads of %d: second event %q, %v", end, n, b.Data, err)
			}
		}
	}
}
