package proxy

import (
	"bytes"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/wire"
)

// usageTap finds the token usage a pass-through answer reports while its
// body is copied to the client, so that the call is metered as a chat call
// is (tokens against the tenant's token limits, spend against its budgets,
// a row in the usage record). It keeps only what it needs, whatever the
// body's size: in a JSON answer (embeddings, completions, a native
// Responses answer) the top-level "usage" object, found by following the
// nesting byte by byte; in an SSE answer the last usage object of its data
// lines ("usage", or a Responses event's "response.usage"), one line at a
// time, a line longer than maxUsageLine (an event that carries a whole
// image) followed byte by byte as a JSON answer is.
type usageTap struct {
	sse   bool
	found []byte // the usage object's bytes: the JSON answer's, or the last of the stream's
	over  bool   // found would exceed maxUsageBytes: the answer's usage is not read
	text  int    // bytes of generated text an SSE answer carried (see outputGuess)

	// JSON: where the scan is. It looks for the member named path[0] of
	// the top-level object, then path[1] of that member's object, and so
	// on, and copies the last one's object into found, as gjson reads a
	// path: an object that lacks the rest of the path is passed over for a
	// later member of its name, but of the last name only the first member
	// counts.
	path      []string // nil: usagePath
	level     int      // path members entered so far: keys are looked at depth level+1
	done      bool     // the path's object cannot come any more
	lx        jsonLexer
	expectKey bool // at depth level+1, the next string is a member's key
	valueNext bool // the next value is a path member's
	usageKey  bool // the path's last name was seen at this level: only its first value counts, as gjson reads it
	capturing bool // inside the usage object, copying it to found
	captured  bool // found holds the whole usage object

	// SSE: the line being read.
	line     []byte
	lineOver bool
	long     *[2]usageTap // scan a data line over maxUsageLine for usage and response.usage (kept for the next)
	longOn   bool         // the line being read is such a line
}

var (
	usagePath         = []string{"usage"}
	responseUsagePath = []string{"response", "usage"} // a Responses API event's
)

const (
	// maxUsageBytes bounds the usage object a tap keeps.
	maxUsageBytes = 4 << 10
	// maxUsageLine bounds an SSE line a tap keeps whole; a longer line (an
	// event carrying a whole image or a long answer) is scanned as it
	// passes.
	maxUsageLine = 64 << 10
	maxUsageKey  = 16
)

// newUsageTap returns a tap for an answer of contentType, or nil for an
// answer that is neither JSON nor SSE (audio, an image), which reports no
// usage.
func newUsageTap(contentType []byte) *usageTap {
	ct := bytes.ToLower(bytes.TrimSpace(contentType))
	switch {
	case isEventStream(contentType):
		return &usageTap{sse: true}
	case bytes.HasPrefix(ct, []byte("application/json")), len(ct) == 0:
		return &usageTap{}
	}
	return nil
}

// isEventStream reports whether contentType is an event stream's (types
// compare without regard to case).
func isEventStream(contentType []byte) bool { return isMediaType(contentType, "text/event-stream") }

// isJSON reports whether contentType is JSON's.
func isJSON(contentType []byte) bool { return isMediaType(contentType, "application/json") }

// isText reports whether contentType may be text a secret is quoted in:
// anything but binary media (audio, images, video, fonts, archives, PDF,
// octet streams), none at all included. The masking it decides is bytes
// replaced where a registered secret stands: harmless where none does.
func isText(contentType []byte) bool {
	ct := bytes.TrimSpace(contentType)
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = bytes.TrimSpace(ct[:i])
	}
	if bytes.IndexByte(ct, ',') >= 0 || hasSuffixFold(ct, "+xml") || hasSuffixFold(ct, "+json") {
		return true // a list of types (which one holds?), or text under a media type (image/svg+xml)
	}
	for _, b := range binaryTypes {
		if isMediaType(ct, b) {
			return false
		}
	}
	return true
}

// hasSuffixFold reports whether b ends with suffix, in any case.
func hasSuffixFold(b []byte, suffix string) bool {
	return len(b) >= len(suffix) && bytes.EqualFold(b[len(b)-len(suffix):], []byte(suffix))
}

// binaryTypes are the media types (or their prefixes) of binary answers.
var binaryTypes = [...]string{"audio/", "image/", "video/", "font/", "application/octet-stream", "binary/",
	"application/pdf", "application/zip", "application/gzip", "application/x-gzip", "application/zstd",
	"application/x-bzip2", "application/x-7z-compressed", "application/x-zip-compressed", "application/x-tar",
	"application/x-protobuf", "application/protobuf", "application/grpc", "application/wasm", "application/ogg",
	"application/vnd."}

// readsAsText reports whether an answer of contentType is read as text
// by the gateway's own parts, so that compressed bytes under it are no
// answer: none at all, text/*, JSON (+json), XML (+xml), an event stream.
// Other types (a file's own, which may be an archive) go as they come.
func readsAsText(contentType []byte) bool {
	ct := bytes.TrimSpace(contentType)
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = bytes.TrimSpace(ct[:i])
	}
	return len(ct) == 0 || isMediaType(ct, "text/") || isJSON(ct) || hasSuffixFold(ct, "+json") ||
		hasSuffixFold(ct, "+xml") || hasSuffixFold(ct, "/xml")
}

// isMediaType reports whether contentType starts with the media type mt
// (parameters may follow), in any case.
func isMediaType(contentType []byte, mt string) bool {
	ct := bytes.TrimSpace(contentType)
	return len(ct) >= len(mt) && bytes.EqualFold(ct[:len(mt)], []byte(mt))
}

// write takes the next bytes of the answer.
func (u *usageTap) write(p []byte) {
	if u.sse {
		u.lines(p)
		return
	}
	u.scan(p)
}

// scan follows a JSON answer's nesting and copies its top-level usage
// object into found.
func (u *usageTap) scan(p []byte) {
	if u.captured || u.done {
		return // the first usage member is the one read, as gjson would
	}
	path := u.path
	if path == nil {
		path = usagePath
	}
	lx := &u.lx
	lx.p, lx.i = p, 0
	start := 0 // where the usage object's bytes in p start, while capturing
	for {
		keyDepth := u.level + 1
		lx.deep = keyDepth // keys are read there; deeper, only the nesting counts
		switch lx.next() {
		case lexEnd:
			if u.capturing {
				u.copy(p[start:])
			}
			return
		case lexString:
			if lx.depth == keyDepth && u.expectKey {
				u.expectKey = false
				lx.readString(lexMember, maxUsageKey)
			}
		case lexMember:
			// A key read at depth level+1: deeper colons are not reported.
			last := u.level+1 == len(path)
			switch {
			case last && u.usageKey:
			case lx.esc && last:
				// It may spell the name, as gjson reads it: a later
				// member of that name is not the one gjson would read.
				u.usageKey = true
			case lx.esc:
				// It may spell a name of the path, whose object gjson
				// would read: give up rather than read another.
				u.done = true
				return
			case !lx.long && string(lx.buf) == path[u.level]:
				u.valueNext = true
				u.usageKey = u.usageKey || last
			}
			continue
		case lexComma:
			if lx.depth == keyDepth {
				u.expectKey = true
			}
		case lexOpen:
			if lx.depth-1 == keyDepth && u.valueNext && lx.c == '{' && !u.over {
				if u.level+1 < len(path) {
					// The path goes on inside this object.
					u.level++
					keyDepth = u.level + 1
					u.usageKey = false
				} else {
					u.capturing, start = true, lx.i-1
					u.found = u.found[:0]
				}
			}
			if lx.depth == keyDepth && lx.c == '{' {
				u.expectKey = true
			}
		case lexClose:
			if u.capturing && lx.depth == keyDepth {
				if u.copy(p[start:lx.i]) {
					u.capturing, u.captured = false, true
					return
				}
			}
			if lx.depth < keyDepth && u.level > 0 {
				// The path's member ended without the rest of the path.
				if u.usageKey {
					u.done = true // it had the last name, not an object: gjson reads no other
					return
				}
				u.level--
			}
		}
		u.valueNext = false
	}
}

// copy adds b to the usage object's bytes in found; it reports false, and
// ends the capture with over, when they would exceed maxUsageBytes.
func (u *usageTap) copy(b []byte) bool {
	if len(u.found)+len(b) > maxUsageBytes {
		u.capturing, u.over, u.found = false, true, nil
		return false
	}
	u.found = append(u.found, b...)
	return true
}

// settled reports whether the rest of a JSON answer cannot change what the
// tap found: its usage object is whole, too large, or cannot come.
func (u *usageTap) settled() bool {
	if u.captured || u.done || u.over {
		return true
	}
	// The top-level usage member was seen and its value is not an object.
	return u.usageKey && u.level == 0 && len(u.path) <= 1 && !u.valueNext && !u.capturing
}

// lines reads an SSE answer line by line and keeps the last usage object
// of its data lines.
func (u *usageTap) lines(p []byte) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		part := p
		if i >= 0 {
			part = p[:i]
		}
		switch {
		case u.lineOver:
			u.scanLong(part)
		case len(u.line)+len(part) > maxUsageLine:
			u.lineOver = true
			u.startLong(part)
		default:
			u.line = append(u.line, part...)
		}
		if i < 0 {
			return
		}
		p = p[i+1:]
		if u.lineOver {
			u.endLong()
		} else {
			u.event(bytes.TrimRight(u.line, "\r"))
		}
		u.line, u.lineOver = u.line[:0], false
	}
}

// startLong begins the scan of a line grown past maxUsageLine, whose
// bytes so far are u.line then part, if it is a data line; the rest of the
// line passes through scanLong.
func (u *usageTap) startLong(part []byte) {
	const prefix = "data:"
	var head [len(prefix)]byte
	n := copy(head[:], u.line)
	n += copy(head[n:], part)
	u.longOn = n == len(prefix) && string(head[:]) == prefix
	if u.longOn {
		if u.long == nil {
			u.long = &[2]usageTap{}
		}
		for i, path := range [2][]string{usagePath, responseUsagePath} {
			sc := &u.long[i]
			*sc = usageTap{path: path, found: sc.found[:0], lx: jsonLexer{buf: sc.lx.buf[:0]}}
		}
		skip := min(len(prefix), len(u.line))
		u.scanLong(u.line[skip:])
		u.scanLong(part[len(prefix)-skip:])
	}
	u.line = u.line[:0]
}

// scanLong takes the next bytes of a long line.
func (u *usageTap) scanLong(p []byte) {
	if !u.longOn || len(p) == 0 {
		return
	}
	u.long[0].scan(p)
	u.long[1].scan(p)
}

// endLong keeps the usage a long data line carried, as event does for a
// line kept whole: its "usage", else its "response.usage".
func (u *usageTap) endLong() {
	if !u.longOn {
		return
	}
	u.longOn = false
	for i := range u.long {
		sc := &u.long[i]
		switch {
		case sc.over:
			u.over, u.found = true, nil
			return
		case sc.captured && jsonvalid.Bytes(sc.found):
			u.over, u.found = false, append(u.found[:0], sc.found...)
			return
		}
	}
}

// event keeps the usage object of one SSE line, if it is a data line with
// one.
func (u *usageTap) event(line []byte) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return
	}
	data = bytes.TrimSpace(data)
	if len(data) == 0 || data[0] != '{' || !jsonvalid.Bytes(data) {
		return
	}
	u.text += generatedText(data)
	v := gjson.GetBytes(data, "usage")
	if !v.IsObject() {
		v = gjson.GetBytes(data, "response.usage") // a Responses API event
	}
	if !v.IsObject() {
		return
	}
	if len(v.Raw) > maxUsageBytes {
		u.over, u.found = true, nil
		return
	}
	u.over, u.found = false, append(u.found[:0], v.Raw...)
}

// generatedText counts the bytes of text one SSE event of an answer
// carries: a completion choice's text or a chat delta's content, or a
// Responses event's delta.
func generatedText(data []byte) int {
	if d := gjson.GetBytes(data, "delta"); d.Type == gjson.String {
		return len(d.Str)
	}
	n := 0
	gjson.GetBytes(data, "choices").ForEach(func(_, c gjson.Result) bool {
		n += len(c.Get("text").Str) + len(c.Get("delta.content").Str)
		return true
	})
	return n
}

// usage returns the counts of the usage the answer reported: the chat
// form (prompt_tokens, completion_tokens: chat, completions, embeddings)
// or the Responses form (input_tokens, output_tokens); ok is false when
// the answer reported none that the tap could keep. The counts are then
// a guess of the output: a streamed answer without usage (a completions
// stream that did not ask for it, or one cut short) still made the text it
// sent, about four bytes a token.
func (u *usageTap) usage() (wire.ChatUsage, bool) {
	if u.over || len(u.found) == 0 || (!u.sse && !u.captured) || !jsonvalid.Bytes(u.found) {
		return wire.ChatUsage{Completion: int64(u.text+3) / 4}, false
	}
	v := gjson.ParseBytes(u.found)
	parse := wire.ParseChatUsage
	if v.Get("input_tokens").Exists() || v.Get("output_tokens").Exists() {
		parse = wire.ParseResponsesUsage
	}
	if c, ok := parse(v); ok {
		return c, true
	}
	return wire.ChatUsage{Completion: int64(u.text+3) / 4}, false // a usage whose counts are no counts: as none
}
