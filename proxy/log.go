package proxy

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
)

// fasthttpLogger sends fasthttp's own messages (a connection that failed to
// parse, a client reset) to the debug log. fasthttp quotes what it read from
// the connection into those messages: a whole header block, one header's
// value, a request URI. Those bytes carry gateway keys, upstream
// credentials and cookies, so every quoted text is rewritten before the
// line is logged: a header block keeps its request line's method, path and
// protocol and its header names, and every value becomes its length; any
// other quoted text becomes its length, except a network address.
type fasthttpLogger struct{ log zerolog.Logger }

func (l fasthttpLogger) Printf(format string, args ...any) {
	if e := l.log.Debug(); e.Enabled() {
		e.Str("source", "fasthttp").Msg(redactWire(fmt.Sprintf(format, args...)))
	}
}

// redactWire rewrites every Go-quoted text in msg (see fasthttpLogger).
func redactWire(msg string) string {
	var b strings.Builder
	afterEllipsis := false // the previous quoted text ended with a cut: this one starts mid-line
	for {
		i := strings.IndexByte(msg, '"')
		if i < 0 {
			b.WriteString(msg)
			return b.String()
		}
		q, err := strconv.QuotedPrefix(msg[i:])
		if err != nil {
			// An unbalanced quote: nothing after it can be told apart from
			// connection bytes.
			b.WriteString(msg[:i])
			fmt.Fprintf(&b, "[%d bytes]", len(msg)-i)
			return b.String()
		}
		b.WriteString(msg[:i])
		s, _ := strconv.Unquote(q)
		b.WriteString(redactQuoted(s, afterEllipsis && i == 0))
		msg = msg[i+len(q):]
		afterEllipsis = strings.HasPrefix(msg, "...")
		if afterEllipsis {
			b.WriteString("...")
			msg = msg[3:]
		}
	}
}

// redactQuoted rewrites one quoted text; midLine says it starts after a cut.
func redactQuoted(s string, midLine bool) string {
	if isAddr(s) {
		return strconv.Quote(s)
	}
	if !strings.ContainsAny(s, "\r\n") {
		return fmt.Sprintf("[%d bytes]", len(s))
	}
	lines := strings.SplitAfter(s, "\n")
	out := make([]string, 0, len(lines))
	for n, line := range lines {
		if line == "" {
			continue
		}
		body := strings.TrimRight(line, "\r\n")
		eol := line[len(body):]
		switch {
		case body == "":
		case n == 0 && midLine:
			body = fmt.Sprintf("[%d bytes]", len(body))
		case n == 0 || (n == 1 && strings.TrimSpace(lines[0]) == ""):
			body = redactRequestLine(body)
		default:
			body = redactHeaderLine(body)
		}
		out = append(out, body+eol)
	}
	return strconv.Quote(strings.Join(out, ""))
}

// redactRequestLine keeps a request or status line's method, path (without
// its query) and protocol.
func redactRequestLine(line string) string {
	parts := strings.Split(line, " ")
	if len(parts) != 3 || !config.IsToken(parts[0]) {
		return redactHeaderLine(line)
	}
	if strings.HasPrefix(parts[0], "HTTP/") { // a status line
		if len(parts[1]) == 3 {
			return parts[0] + " " + parts[1] + " " + fmt.Sprintf("[%d bytes]", len(parts[2]))
		}
		return fmt.Sprintf("[%d bytes]", len(line))
	}
	path, query, hasQuery := strings.Cut(parts[1], "?")
	if hasQuery {
		path += fmt.Sprintf("?[%d bytes]", len(query))
	}
	if !strings.HasPrefix(parts[2], "HTTP/") || len(parts[2]) > 8 {
		parts[2] = fmt.Sprintf("[%d bytes]", len(parts[2]))
	}
	return parts[0] + " " + path + " " + parts[2]
}

// redactHeaderLine keeps a header's name; the value becomes its length. A
// line that is not "token: value" becomes its length.
func redactHeaderLine(line string) string {
	name, value, ok := strings.Cut(line, ":")
	if !ok || !config.IsToken(name) {
		return fmt.Sprintf("[%d bytes]", len(line))
	}
	return fmt.Sprintf("%s: [%d bytes]", name, len(strings.TrimSpace(value)))
}

// isAddr reports whether s is an IP address with a port, as fasthttp quotes
// a connection's ends.
func isAddr(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return false
	}
	host, _, _ = strings.Cut(host, "%")
	return net.ParseIP(host) != nil
}
