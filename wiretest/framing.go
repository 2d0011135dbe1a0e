package wiretest

import (
	"bytes"
	"fmt"
	"unicode/utf8"
)

// event is one SSE event as the client received it, strictly framed.
type event struct {
	line     int    // 1-based line where the event starts
	data     []byte // value of its single data line; aliases raw
	isError  bool   // it had an "event: error" line
	comments int    // comment lines in it
	hasData  bool
}

// splitEvents parses raw into events, enforcing the framing rules of
// docs/wire.md rules 1 to 4 that the lenient SDK parsers would forgive: every
// line ends in "\n" (no '\r'), every event ends with a blank line, the only
// lines are "data:", ":" comments and "event: error", one data line per event.
func splitEvents(raw []byte) ([]event, *Violation) {
	var (
		events []event
		cur    event
		open   bool // cur has at least one line
		lineNo int
	)
	fail := func(line int, format string, args ...any) *Violation {
		return &Violation{Chunk: 0, Line: line, Rule: RuleFraming, Msg: fmt.Sprintf(format, args...)}
	}
	for len(raw) > 0 {
		lineNo++
		i := bytes.IndexByte(raw, '\n')
		if i < 0 {
			return nil, fail(lineNo, "last line %q does not end with \\n", clip(raw))
		}
		line := raw[:i]
		raw = raw[i+1:]
		if bytes.IndexByte(line, '\r') >= 0 {
			return nil, fail(lineNo, "line contains \\r; lines must end with a bare \\n")
		}
		if !utf8.Valid(line) {
			return nil, &Violation{Line: lineNo, Rule: RuleUTF8, Msg: fmt.Sprintf("invalid UTF-8 in line %q", clip(line))}
		}
		if len(line) == 0 {
			if open {
				if !cur.hasData {
					if cur.isError {
						return nil, fail(cur.line, "event: error without a data line")
					}
				}
				events = append(events, cur)
			}
			cur, open = event{}, false
			continue
		}
		if !open {
			cur, open = event{line: lineNo}, true
		}
		switch {
		case line[0] == ':':
			cur.comments++
		case bytes.HasPrefix(line, []byte("data:")):
			if cur.hasData {
				return nil, fail(lineNo, "second data line in one event; keep each chunk on one line")
			}
			v := line[len("data:"):]
			if len(v) > 0 && v[0] == ' ' {
				v = v[1:]
			}
			cur.data, cur.hasData = v, true
		case string(line) == "event: error":
			if cur.isError || cur.hasData {
				return nil, fail(lineNo, "event: error must come once, before the data line")
			}
			cur.isError = true
		default:
			return nil, fail(lineNo, "line %q not allowed: only data:, : comments and event: error", clip(line))
		}
	}
	if open {
		return nil, fail(cur.line, "last event is not terminated by a blank line")
	}
	return events, nil
}

// clip shortens b for an error message.
func clip(b []byte) string {
	const max = 120
	if len(b) > max {
		return string(b[:max]) + "..."
	}
	return string(b)
}
