package mcpclient

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The SDK fails the whole Streamable HTTP connection, every call in flight
// on it, when it cannot read one answer: a body or an SSE event over the
// bound on one message, or one that is not a JSON-RPC message. headerRT
// turns such an answer to a call into a JSON-RPC error answer to that
// call's id, with one of these codes and messages of the gateway's own:
// the call alone fails (Manager.Call tells it apart, refusedAnswer), and
// the connection and the other calls go on.
const (
	codeAnswerTooLarge   = -32091
	codeAnswerUnreadable = -32092
)

var refusedMessages = map[int64]string{
	codeAnswerTooLarge:   "mcpclient: the MCP server's answer exceeds " + strconv.Itoa(maxMessageBytes) + " bytes",
	codeAnswerUnreadable: "mcpclient: the MCP server's answer is not a JSON-RPC message",
}

// refusedAnswer returns the code of err when it is headerRT's error answer
// (code and message both its own), else 0.
func refusedAnswer(err error) int64 {
	var we *jsonrpc.Error
	if errors.As(err, &we) && refusedMessages[we.Code] != "" && we.Message == refusedMessages[we.Code] {
		return we.Code
	}
	return 0
}

// errorAnswer is the JSON-RPC error response with code to the request id.
func errorAnswer(id jsonrpc.ID, code int64) []byte {
	b, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: &jsonrpc.Error{Code: code, Message: refusedMessages[code]}})
	if err != nil {
		panic(err) // an ID and a fixed error always encode
	}
	return b
}

// requestID returns the id of the JSON-RPC request r's body carries, when
// it is a call (a request with an id; not a notification or a response):
// its answer is the one to guard. The body is read from a copy (GetBody,
// which the SDK's requests have) or read and put back, intact.
func requestID(r *http.Request) (jsonrpc.ID, bool) {
	if r.Method != http.MethodPost || r.Body == nil || r.Body == http.NoBody {
		return jsonrpc.ID{}, false
	}
	var b []byte
	var err error
	if r.GetBody != nil {
		var rc io.ReadCloser
		if rc, err = r.GetBody(); err != nil {
			return jsonrpc.ID{}, false
		}
		b, err = io.ReadAll(rc)
		rc.Close()
	} else {
		b, err = io.ReadAll(r.Body)
		r.Body.Close()
		// Put back for the base transport: what was read, then the
		// failure, if any, as it would have met it.
		var rest io.Reader = bytes.NewReader(b)
		if err != nil {
			rest = io.MultiReader(rest, errReader{err})
		}
		r.Body = io.NopCloser(rest)
	}
	if err != nil {
		return jsonrpc.ID{}, false
	}
	return callID(b)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// callID is the id of the JSON-RPC call in body, decoded as the SDK
// decodes messages.
func callID(body []byte) (jsonrpc.ID, bool) {
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		return jsonrpc.ID{}, false
	}
	req, ok := msg.(*jsonrpc.Request)
	if !ok || !req.IsCall() {
		return jsonrpc.ID{}, false
	}
	return req.ID, true
}

// jsonGuard is the application/json answer to a call: on the first read
// it reads the body whole, at most limit+1 bytes (the SDK reads it whole
// too), and passes it on when the SDK can decode it; otherwise it passes
// on the error answer to id instead and closes the body, unread past the
// bound.
type jsonGuard struct {
	body     io.ReadCloser
	id       jsonrpc.ID
	over     *atomic.Bool // the call's, set when the answer is too large
	limit    int
	declared bool // the body's declared length is over limit
	r        *bytes.Reader
	err      error // the body's read error, after what was read
}

func (g *jsonGuard) Read(p []byte) (int, error) {
	if g.r == nil {
		g.r = bytes.NewReader(g.fill())
	}
	n, err := g.r.Read(p)
	if err == io.EOF && g.err != nil {
		err = g.err
	}
	return n, err
}

func (g *jsonGuard) Close() error { return g.body.Close() }

func (g *jsonGuard) fill() []byte {
	var b []byte
	tooLarge := g.declared
	if !tooLarge {
		var err error
		b, err = readAtMost(g.body, g.limit+1)
		switch {
		case len(b) > g.limit:
			tooLarge = true
		case err != nil:
			// A transport failure, not the answer's: as before.
			g.err = err
			return b
		}
	}
	switch {
	case tooLarge:
		if g.over != nil {
			g.over.Store(true)
		}
		g.body.Close()
		return errorAnswer(g.id, codeAnswerTooLarge)
	case !decodes(b):
		g.body.Close()
		return errorAnswer(g.id, codeAnswerUnreadable)
	}
	return b
}

// decodes reports whether the SDK can decode data as a JSON-RPC message.
func decodes(data []byte) bool {
	_, err := jsonrpc.DecodeMessage(data)
	return err == nil
}

// readAtMost reads r to its end or to n bytes, holding no more than n:
// the buffer grows by doubling up to n, not past it (io.ReadAll's may).
func readAtMost(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, 0, min(512, n))
	for len(b) < n {
		if len(b) == cap(b) {
			b = append(make([]byte, 0, min(2*cap(b), n)), b...)
		}
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// sseGuard is the text/event-stream answer to a call. It passes the stream
// on event by event, each as it came, once it has read the event whole
// and found it one the SDK reads: at most limit bytes, counted as the SDK
// counts them (every line's bytes, line ends and the blank line ending it
// included), and whose data, in a message event, decodes as a JSON-RPC
// message. The first event that is not ends the stream: in its place comes
// one event carrying the error answer to id, then the end, and the body is
// closed, unread past the event's bound. An event is held whole (at most
// limit bytes) before it is passed on: the SDK acts on none before its
// end either.
type sseGuard struct {
	body     io.ReadCloser
	br       *bufio.Reader
	id       jsonrpc.ID
	over     *atomic.Bool // the call's, set when an event is too large
	limit    int          // of an event, its lines' framing included
	msgLimit int          // of a message event's data, the message itself

	ev   []byte   // the current event's bytes so far, or those being passed on
	off  int      // of ev, the bytes passed on so far, when passing on
	out  bool     // ev is being passed on
	end  error    // the stream's end (io.EOF or a read error), once met
	name []byte   // the current event's name
	dl   [][2]int // its data lines' values, as offsets in ev (no copy)
	bad  bool     // it has a line the SDK refuses (no colon)
}

// newSSEGuard guards body, whose events may be limit bytes each (the SDK's
// bound, framing included) and whose messages msgLimit bytes each.
func newSSEGuard(body io.ReadCloser, id jsonrpc.ID, over *atomic.Bool, limit, msgLimit int) *sseGuard {
	return &sseGuard{body: body, br: bufio.NewReader(body), id: id, over: over, limit: limit, msgLimit: msgLimit}
}

func (g *sseGuard) Close() error { return g.body.Close() }

func (g *sseGuard) Read(p []byte) (int, error) {
	for {
		if g.out {
			if g.off < len(g.ev) {
				n := copy(p, g.ev[g.off:])
				g.off += n
				return n, nil
			}
			g.out = false
			g.ev, g.off = g.ev[:0], 0
			if cap(g.ev) > 64<<10 {
				g.ev = nil // not kept for the stream's life
			}
		}
		if g.end != nil {
			return 0, g.end
		}
		g.next()
	}
}

// next reads the next event (or what is left at the stream's end) into
// ev and sets it to be passed on, or the error answer in its place.
func (g *sseGuard) next() {
	g.name, g.dl, g.bad = g.name[:0], g.dl[:0], false
	for {
		start := len(g.ev)
		err := g.readLine()
		if errors.Is(err, errEventOver) {
			g.refuse(codeAnswerTooLarge)
			return
		}
		if err != nil && err != io.EOF {
			// A transport failure: what was read, then the failure, as
			// the SDK would have met it.
			g.end, g.out = err, true
			return
		}
		line := bytes.TrimRight(g.ev[start:], "\r\n")
		g.field(start, line)
		if len(line) == 0 || err == io.EOF {
			if err == io.EOF {
				g.end = io.EOF
			}
			message := len(g.name) == 0 || string(g.name) == "message"
			if message && g.dataLen() > g.msgLimit {
				g.refuse(codeAnswerTooLarge)
				return
			}
			if g.bad || message && !g.dataDecodes() {
				g.refuse(codeAnswerUnreadable)
				return
			}
			g.out = true
			return
		}
	}
}

// field notes one non-blank line of the event, as the SDK parses it; the
// line is ev's from offset start.
func (g *sseGuard) field(start int, line []byte) {
	if len(line) == 0 {
		return
	}
	name, value, ok := bytes.Cut(line, []byte{':'})
	switch {
	case !ok:
		g.bad = true
	case string(name) == "event":
		g.name = append(g.name[:0], bytes.TrimSpace(value)...)
	case string(name) == "data":
		// Noted where it is in ev: copied (joined) only to be decoded.
		value = bytes.TrimSpace(value)
		off := start + cap(line) - cap(value) // value is line's, within
		if len(value) == 0 {
			off = start
		}
		g.dl = append(g.dl, [2]int{off, off + len(value)})
	}
}

// dataLen is the length of the event's data, its lines joined.
func (g *sseGuard) dataLen() int {
	n := max(len(g.dl)-1, 0)
	for _, o := range g.dl {
		n += o[1] - o[0]
	}
	return n
}

// dataDecodes reports whether the event's data, its lines joined with '\n'
// as the SDK joins them, is empty (one empty line, or none) or decodes as a
// JSON-RPC message. One line
// (the usual) is decoded where it is; more are joined in a copy that lives
// only for the check, so that an event is held at most twice, and only
// while it is checked.
func (g *sseGuard) dataDecodes() bool {
	switch len(g.dl) {
	case 0:
		return true
	case 1:
		d := g.ev[g.dl[0][0]:g.dl[0][1]]
		return len(d) == 0 || decodes(d)
	}
	n := len(g.dl) - 1
	for _, o := range g.dl {
		n += o[1] - o[0]
	}
	joined := make([]byte, 0, n)
	for i, o := range g.dl {
		if i > 0 {
			joined = append(joined, '\n')
		}
		joined = append(joined, g.ev[o[0]:o[1]]...)
	}
	return decodes(joined)
}

var errEventOver = errors.New("mcpclient: SSE event over the bound")

// readLine appends the stream's next line to ev, line end included,
// unless the event would go over limit (errEventOver); ev never grows
// past limit bytes.
func (g *sseGuard) readLine() error {
	for {
		frag, err := g.br.ReadSlice('\n')
		if len(g.ev)+len(frag) > g.limit {
			return errEventOver
		}
		if cap(g.ev)-len(g.ev) < len(frag) {
			c := min(max(2*cap(g.ev), len(g.ev)+len(frag), 4096), g.limit)
			g.ev = append(make([]byte, 0, c), g.ev...)
		}
		g.ev = append(g.ev, frag...)
		if err != bufio.ErrBufferFull {
			return err
		}
	}
}

// refuse puts the error answer with code in the event's place, to end the
// stream, and closes the body.
func (g *sseGuard) refuse(code int64) {
	if code == codeAnswerTooLarge && g.over != nil {
		g.over.Store(true)
	}
	g.body.Close()
	g.ev = append(append(append(g.ev[:0:0], "data: "...), errorAnswer(g.id, code)...), "\n\n"...)
	g.off, g.out, g.end = 0, true, io.EOF
}
