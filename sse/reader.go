// Package sse reads and writes Server-Sent Events framing as used by the
// OpenAI chat-completion stream: a Reader that turns an upstream body into
// events without allocating per event, and append functions that frame the
// chunks the gateway sends to its clients.
//
// Nothing here parses JSON: an event's data is handed over as raw bytes.
package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"sync"
)

// ErrEventTooLarge is returned by Reader.Next when one event (or one line)
// exceeds the Reader's maxEventBytes. The Reader is unusable afterwards.
var ErrEventTooLarge = errors.New("sse: event too large")

// DefaultMaxEventBytes is a limit suited to chat-completion chunks: far above
// any real chunk, far below what would let a broken upstream exhaust memory.
const DefaultMaxEventBytes = 4 << 20

// initialBufSize is a Reader's buffer: a chat chunk or two (a few hundred
// bytes each). It doubles for a longer line; reads come from a buffered
// connection, so a small buffer costs copies, not system calls.
const initialBufSize = 1024

// idleBufs holds the buffers of Readers that are waiting for input with
// nothing pending: an open stream spends most of its life waiting between
// events, and a gateway holding thousands of them would otherwise hold a
// buffer for each. A Reader takes one back once bytes arrive.
var idleBufs = sync.Pool{New: func() any { return new([initialBufSize]byte) }}

// Event is one dispatched SSE event.
//
// Name and Data alias buffers owned by the Reader that returned the Event:
// they are valid only until the next call to Next. Copy them to keep them.
type Event struct {
	// Name is the value of the last "event:" line, or nil when the event had none.
	Name []byte
	// Data is the value of every "data:" line, joined with '\n'. It never
	// contains '\r'. It is non-nil (possibly empty) for every returned event.
	Data []byte
}

// Reader parses SSE events from an io.Reader, following the WHATWG event
// stream rules: '\n', "\r\n" and a lone '\r' end a line; a line starting with
// ':' is a comment; "field:value" and "field: value" are the same; "id:",
// "retry:" and unknown fields are ignored; a blank line dispatches the event;
// an event without any "data:" line is skipped; a leading UTF-8 BOM is dropped.
//
// The input may arrive in arbitrary pieces (split anywhere, including inside
// a line terminator or a multi-byte character); a lone '\r' at the end of a
// read dispatches at once, without waiting for the next byte.
//
// A Reader reuses its buffers, so steady-state reading allocates nothing. It
// is not safe for concurrent use.
type Reader struct {
	r   io.Reader
	max int

	buf        []byte // buffered input; buf[start:end] is unread; nil while waiting with nothing pending
	start, end int
	// scanned is how many bytes from start are known to hold neither '\n'
	// nor '\r': a long line is searched once, not again from its start
	// after every read (which made a line's cost grow with its square).
	scanned int
	wait    [16]byte // what a read with nothing pending reads into, before buf is taken back
	err     error    // sticky error from r, returned once buf is drained

	skipLF  bool // the previous line ended in '\r': drop a leading '\n'
	started bool // the first line has been read (BOM handling)
	dirty   bool // bytes of an undispatched event have been read

	name    []byte
	hasName bool
	data    []byte
	hasData bool
	// view says the event's data is its one data line's value, still in
	// buf at buf[viewAt:viewAt+viewLen], not copied to data: fill keeps
	// those bytes (and moves viewAt with them) until the event dispatches.
	view            bool
	viewAt, viewLen int
	size            int // bytes of the current event so far
	fatal           error

	activity Activity // told of every read that brought bytes; nil = none

	// stray is the first line, before any event was dispatched, that is
	// not an SSE line at all (no field SSE knows: an error object or an
	// HTML page where a stream was due), at most maxStray bytes; sent
	// says an event was dispatched.
	stray []byte
	sent  bool
}

// maxStray bounds the stray line a Reader keeps.
const maxStray = 4096

// Stray returns, while no event was dispatched, the first line of the
// input that was no SSE field, comment or blank line (at most 4 KiB of
// it), or nil: what a server that answered a stream request with
// something else sent instead. Valid until the next Reset.
func (rd *Reader) Stray() []byte {
	if rd.sent {
		return nil
	}
	return rd.stray
}

// Activity is told each time bytes arrive from a Reader's input, comments
// and partial events included: what an idle timeout watches.
type Activity interface {
	Active()
}

// Watch makes a tell of every read that brings bytes, until the next Reset.
func (rd *Reader) Watch(a Activity) { rd.activity = a }

// NewReader returns a Reader that reads events from r. maxEventBytes bounds
// the bytes of one event (its non-comment lines, field names included,
// terminators excluded) and of any single line, and so the memory the Reader
// may use; a value <= 0 means DefaultMaxEventBytes.
func NewReader(r io.Reader, maxEventBytes int) *Reader {
	if maxEventBytes <= 0 {
		maxEventBytes = DefaultMaxEventBytes
	}
	return &Reader{r: r, max: maxEventBytes}
}

// Reset makes the Reader read from r, keeping its buffers for reuse.
func (rd *Reader) Reset(r io.Reader) {
	*rd = Reader{r: r, max: rd.max, buf: rd.buf, name: rd.name[:0], data: rd.data[:0]}
}

// Retained returns the bytes of buffer a Reader keeps for reuse across
// Reset: what a pool of Readers holds for each.
func (rd *Reader) Retained() int { return cap(rd.buf) + cap(rd.data) + cap(rd.name) }

// Next returns the next event that carries data.
//
// It returns io.EOF when the input ends cleanly between events,
// io.ErrUnexpectedEOF when the input ends with bytes after the last blank
// line (a cut stream: the partial event is not returned), ErrEventTooLarge
// when an event exceeds the limit, or the underlying reader's error. Errors
// are sticky. The returned Event's slices are valid until the next call.
func (rd *Reader) Next() (Event, error) {
	if rd.fatal != nil {
		return Event{}, rd.fatal
	}
	for {
		line, err := rd.readLine()
		if err != nil {
			if err == io.EOF && rd.dirty {
				err = io.ErrUnexpectedEOF
			}
			rd.fatal = err
			return Event{}, err
		}
		if len(line) == 0 {
			if rd.hasData {
				ev := Event{Data: rd.data}
				if rd.view {
					ev.Data = rd.buf[rd.viewAt : rd.viewAt+rd.viewLen : rd.viewAt+rd.viewLen]
				}
				if rd.hasName {
					ev.Name = rd.name
				}
				rd.clearEvent()
				rd.sent = true
				return ev, nil
			}
			rd.clearEvent()
			continue
		}
		rd.dirty = true
		if line[0] != ':' { // comments are dropped at once: they hold no memory
			rd.size += len(line)
		}
		if rd.size > rd.max || len(line) > rd.max {
			rd.fatal = ErrEventTooLarge
			return Event{}, ErrEventTooLarge
		}
		rd.field(line)
	}
}

func (rd *Reader) clearEvent() {
	rd.name = rd.name[:0]
	rd.hasName = false
	rd.data = rd.data[:0]
	rd.hasData = false
	rd.view = false
	rd.size = 0
	rd.dirty = false
}

// field applies one non-blank line to the event being built.
func (rd *Reader) field(line []byte) {
	if line[0] == ':' {
		return // comment
	}
	name, value := line, line[len(line):]
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) { // no allocation: the compiler special-cases this
	case "data":
		switch {
		case !rd.hasData:
			// Most events have one data line: its value stays where it was
			// read (value is a view of buf), no copy.
			rd.view, rd.viewAt, rd.viewLen = true, cap(rd.buf)-cap(value), len(value)
		case rd.view:
			rd.data = append(rd.data[:0], rd.buf[rd.viewAt:rd.viewAt+rd.viewLen]...)
			rd.view = false
			fallthrough
		default:
			rd.data = append(rd.data, '\n')
			rd.data = append(rd.data, value...)
		}
		rd.hasData = true
	case "event":
		rd.name = append(rd.name[:0], value...)
		rd.hasName = true
	case "id", "retry":
	default:
		rd.noteStray(line)
	}
}

// noteTail notes the unterminated last line, buf[start:end], as stray
// (noteStray). A function of its own, taking no slice, so that readLine's
// frame stays small: readLine is on the stack of every stream while it
// waits for the upstream.
//
//go:noinline
func (rd *Reader) noteTail() { rd.noteStray(rd.buf[rd.start:rd.end]) }

// noteStray keeps line as the stray line (Stray) when it is the first one
// before any event that is no SSE: not a comment, and no field SSE knows,
// even cut short.
func (rd *Reader) noteStray(line []byte) {
	if rd.sent || rd.stray != nil || len(line) == 0 || line[0] == ':' {
		return
	}
	name := line
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name = line[:i]
	}
	for _, f := range [...]string{"data", "event", "id", "retry"} {
		if string(name) == f || (len(name) == len(line) && strings.HasPrefix(f, string(name))) {
			return // a field, or the start of one cut with the input
		}
	}
	rd.stray = append([]byte(nil), line[:min(len(line), maxStray)]...)
}

// readLine returns the next line without its terminator. The slice aliases
// rd.buf and is valid until the next readLine.
func (rd *Reader) readLine() ([]byte, error) {
	for {
		if rd.skipLF && rd.start < rd.end {
			if rd.buf[rd.start] == '\n' {
				rd.start++
			}
			rd.skipLF = false
		}
		if rd.start < rd.end {
			if line, ok := rd.scanLine(); ok {
				return line, nil
			}
		}
		if rd.err != nil {
			if rd.start < rd.end {
				// An unterminated last line: its bytes belong to a cut
				// event, unless they are no SSE at all (a whole body
				// that is something else).
				rd.noteTail()
				rd.dirty = true
				rd.start, rd.scanned = rd.end, 0
			}
			return nil, rd.err
		}
		if err := rd.fill(); err != nil {
			return nil, err
		}
	}
}

// scanLine finds a terminated line in buf[start:end].
func (rd *Reader) scanLine() ([]byte, bool) {
	b := rd.buf[rd.start:rd.end]
	from := min(rd.scanned, len(b))
	i := bytes.IndexByte(b[from:], '\n')
	seg := b[from:]
	if i >= 0 {
		i += from
		seg = b[from:i]
	}
	if j := bytes.IndexByte(seg, '\r'); j >= 0 {
		j += from
		rd.scanned = 0
		line := b[:j]
		if j+1 < len(b) {
			if b[j+1] == '\n' {
				rd.start += j + 2
			} else {
				rd.start += j + 1
			}
		} else {
			rd.start += j + 1
			rd.skipLF = true
		}
		return rd.bom(line), true
	}
	if i < 0 {
		rd.scanned = len(b)
		return nil, false
	}
	rd.scanned = 0
	rd.start += i + 1
	return rd.bom(b[:i]), true
}

func (rd *Reader) bom(line []byte) []byte {
	if !rd.started {
		rd.started = true
		line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
	}
	return line
}

// fill reads more input, compacting or growing the buffer first. It returns
// an error only when the pending line exceeds the limit.
func (rd *Reader) fill() error {
	keep := rd.start // the unread input, and a pending event's data view
	if rd.view && rd.viewAt < keep {
		keep = rd.viewAt
	}
	if keep > 0 {
		n := copy(rd.buf, rd.buf[keep:rd.end])
		rd.start, rd.end = rd.start-keep, n
		if rd.view {
			rd.viewAt -= keep
		}
	}
	if rd.end == 0 {
		// Nothing is pending: wait for input without a buffer. A grown
		// buffer (a long line) is left to the collector.
		if len(rd.buf) == initialBufSize {
			idleBufs.Put((*[initialBufSize]byte)(rd.buf))
		}
		rd.buf = nil
		n := rd.read(rd.wait[:])
		rd.buf = idleBufs.Get().(*[initialBufSize]byte)[:]
		rd.end = copy(rd.buf, rd.wait[:n])
		return nil
	}
	if rd.end == len(rd.buf) {
		if rd.end-rd.start > rd.max+3 { // the line alone (plus BOM) is past the limit
			return ErrEventTooLarge
		}
		size := 2 * len(rd.buf)
		if size < initialBufSize {
			size = initialBufSize
		}
		if limit := rd.max + 4; size > limit && limit > len(rd.buf) {
			size = limit
		}
		nb := make([]byte, size)
		copy(nb, rd.buf[:rd.end])
		rd.buf = nb
	}
	rd.end += rd.read(rd.buf[rd.end:])
	return nil
}

// read reads into p and returns how many bytes came, setting rd.err when
// the input failed or ended.
func (rd *Reader) read(p []byte) int {
	// Retry a few empty reads, as bufio does, before calling it an error.
	for range 100 {
		n, err := rd.r.Read(p)
		if n < 0 || n > len(p) {
			rd.err = errors.New("sse: reader returned invalid count")
			return 0
		}
		if n > 0 && rd.activity != nil {
			rd.activity.Active()
		}
		if err != nil {
			rd.err = err
			return n
		}
		if n > 0 {
			return n
		}
	}
	rd.err = io.ErrNoProgress
	return 0
}

// IsDone reports whether data is exactly the stream terminator "[DONE]".
// Node's SDK compares the whole string, so nothing else counts.
func IsDone(data []byte) bool {
	return string(data) == "[DONE]"
}

// EndsWithDone reports whether b, raw SSE input that starts at an event's
// start (or the last bytes of such input, more than the last event and
// the blank line before it), ends with a whole "data: [DONE]" event: a
// data line of exactly [DONE] that starts an event, and the blank line
// that ends it. A Reader given b returns that event last without reading
// more. Any line ending is accepted, and the space after the colon is
// optional.
func EndsWithDone(b []byte) bool {
	v, ok := cutLineEnd(b)
	if !ok {
		return false
	}
	if v, ok = cutLineEnd(v); !ok { // the blank line
		return false
	}
	for _, line := range [...]string{"data: [DONE]", "data:[DONE]"} {
		if rest, ok := bytes.CutSuffix(v, []byte(line)); ok {
			if len(rest) == 0 {
				return true // b starts with it
			}
			// The line starts the event: a blank line (two line ends) before it.
			rest, ok = cutLineEnd(rest)
			if !ok {
				return false
			}
			_, ok = cutLineEnd(rest)
			return ok || len(rest) == 0
		}
	}
	return false
}

// cutLineEnd cuts one line end (CRLF, LF or CR) off the end of b.
func cutLineEnd(b []byte) ([]byte, bool) {
	if v, ok := bytes.CutSuffix(b, []byte("\r\n")); ok {
		return v, true
	}
	if n := len(b); n > 0 && (b[n-1] == '\n' || b[n-1] == '\r') {
		return b[:n-1], true
	}
	return b, false
}

// Buffered returns the input read but not yet parsed: valid until the next
// call to Next. A writer uses it to tell whether the next event is already
// here (see HasEvent).
func (rd *Reader) Buffered() []byte { return rd.buf[rd.start:rd.end] }

// HasEvent reports whether b, raw SSE input (or raw bytes of a chunked
// HTTP body carrying it), holds the end of an event: a blank line.
func HasEvent(b []byte) bool {
	return bytes.Contains(b, lfLF) || bytes.Contains(b, crlfCRLF) || bytes.Contains(b, crCR)
}

// StartsData reports whether b, a Reader's Buffered bytes, begins an event
// that is not complete in b and whose first line is a data line holding a
// JSON object ("data: {..."): the first part of a chat chunk whose rest
// is still to be read.
func StartsData(b []byte) bool {
	v, ok := bytes.CutPrefix(b, []byte("data:"))
	if !ok || HasEvent(b) {
		return false
	}
	v = bytes.TrimPrefix(v, []byte(" "))
	return len(v) > 0 && v[0] == '{'
}

// FirstHasData reports whether b, a Reader's Buffered bytes, holds its
// next event whole, with a data line: the Reader's Next returns it without
// reading more. False may still be such an event (the test is cheap, not
// complete).
func FirstHasData(b []byte) bool {
	_, ok := FirstData(b)
	return ok
}

// FirstData returns the value of the first data line of the first event
// in b, with ok true when that event is complete in b. A comment or an
// event without a data line ends the search (false); lines that are not
// fields of the event (a chunked transfer's size lines between its bytes)
// are passed over.
func FirstData(b []byte) (v []byte, ok bool) {
	for len(b) > 0 {
		i := lineEnd(b)
		if i < 0 {
			return nil, false // the event is not complete in b
		}
		line := b[:i]
		if i == 0 {
			return nil, false // a blank line ends an event without a data line
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			// Complete only when a blank line follows somewhere after it.
			return bytes.TrimPrefix(v, []byte(" ")), HasEvent(b)
		}
		if b[i] == '\r' && i+1 < len(b) && b[i+1] == '\n' {
			i++ // CRLF is one line end
		}
		b = b[i+1:]
	}
	return nil, false
}

// lineEnd returns the index of the first '\r' or '\n' in b, or -1. Two
// vector scans: IndexAny goes byte by byte, and the writer asks this before
// every flush.
func lineEnd(b []byte) int {
	i := bytes.IndexByte(b, '\n')
	seg := b
	if i >= 0 {
		seg = b[:i]
	}
	if j := bytes.IndexByte(seg, '\r'); j >= 0 {
		return j
	}
	return i
}

var (
	lfLF     = []byte("\n\n")
	crlfCRLF = []byte("\r\n\r\n")
	crCR     = []byte("\r\r")
)
