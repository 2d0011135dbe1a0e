package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/llmgw/gateway/observe"
)

// ErrUnavailable reports a call to a tool whose server is not connected.
var ErrUnavailable = errors.New("mcpclient: the tool's MCP server is not connected")

// Call runs the tool exposed as name with args (a JSON object; empty means
// {}). data is what the model should see: the structured content as JSON,
// else the text of the content blocks (other blocks summarised). isError is
// a failure the model can act on, data its message: a tool-level failure
// (MCP isError; see errorData), a JSON-RPC error the server answered with (unknown tool,
// invalid params; its message, bounded), or an answer over the bound on
// one message (the gateway's message). err is a transport failure (server
// down, timeout, protocol error). A failure at the transport, the too
// large answer included, makes the connection check itself with a ping; a
// JSON-RPC error does not: the server answered. args is only read; data is
// owned by the caller. Safe for concurrent use.
func (m *Manager) Call(ctx context.Context, name string, args []byte) (data []byte, isError bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, false, err // ended before it was sent: no server's doing, not counted
	}
	t := m.Lookup(name)
	if t == nil {
		return nil, false, ErrUnavailable
	}
	var s *server
	for _, sv := range m.servers {
		if sv.cfg.Name == t.Server {
			s = sv
		}
	}
	sess := s.current()
	if sess == nil {
		return nil, false, ErrUnavailable
	}
	if len(strings.TrimSpace(string(args))) == 0 {
		args = []byte("{}")
	}
	ctx, over := withOverFlag(ctx)
	call := func(sess *mcp.ClientSession) (*mcp.CallToolResult, error) {
		return callTool(ctx, sess, &mcp.CallToolParams{Name: t.Remote, Arguments: json.RawMessage(args)}, m.opts.StuckGrace, func() {
			select {
			case s.stuck <- sess:
			default:
			}
		})
	}
	res, err := call(sess)
	if errors.Is(err, mcp.ErrSessionMissing) && ctx.Err() == nil {
		// The server no longer knows the session (it expired there, or a
		// restart behind a load balancer lost it): the connection is
		// opened again at once. The SDK fails every call in flight on the
		// session with this error, whichever request met the 404, so this
		// call may have run: it is sent once more on the new session
		// (within its timeout) only when the server says the tool only
		// reads or is idempotent; otherwise the model is told the server
		// was unavailable.
		s.breakSession(sess)
		if t.Tool.Repeatable {
			if sess = s.nextSession(ctx, sess); sess == nil {
				if ctx.Err() != nil {
					countEnded(ctx, s.cfg.Name)
					return nil, false, ctx.Err()
				}
				return nil, false, ErrUnavailable // the reconnect failed
			}
			res, err = call(sess)
		}
		if errors.Is(err, mcp.ErrSessionMissing) {
			err = ErrUnavailable // not the SDK's message: it names the session
		}
	}
	if err != nil {
		var pe *panicError
		if errors.As(err, &pe) {
			m.log.Error().Str("server", s.cfg.Name).Str("tool", t.Remote).Str("panic", fmt.Sprint(pe.p)).Bytes("stack", pe.stack).Msg("mcp: a tool call panicked")
		}
		if ctx.Err() != nil {
			countEnded(ctx, s.cfg.Name)
			return nil, false, err
		}
		switch refusedAnswer(err) {
		case codeAnswerTooLarge:
			// headerRT's answer in place of this call's own, over the
			// bound (over HTTP): the call alone fails, the connection
			// is up. Counted as the broken connection's was.
			if over.Load() {
				metricCalls.WithLabelValues(s.cfg.Name, "error").Inc()
				m.log.Warn().Str("server", s.cfg.Name).Str("tool", t.Remote).Msg("mcp: a tool's answer is over the bound on one message")
				return msgTooLarge, true, nil
			}
		case codeAnswerUnreadable:
			// headerRT's answer in place of this call's own, which the
			// SDK could not decode: the server answered and is up.
			metricCalls.WithLabelValues(s.cfg.Name, "unreadable").Inc()
			m.log.Warn().Str("server", s.cfg.Name).Str("tool", t.Remote).Msg("mcp: a tool's answer is not a JSON-RPC message")
			return msgMalformed, true, nil
		}
		if we := rpcError(err); we != nil {
			metricCalls.WithLabelValues(s.cfg.Name, "rpc_error").Inc()
			return rpcMessage(we), true, nil
		}
		if unreadable(err) {
			// The server answered: no reconnect, and the model is told.
			metricCalls.WithLabelValues(s.cfg.Name, "unreadable").Inc()
			return msgUnreadable, true, nil
		}
		metricCalls.WithLabelValues(s.cfg.Name, "error").Inc()
		if tooLarge(err) {
			// Over HTTP a call's answer over the bound comes as headerRT's
			// error answer (above); this is stdio's line, or a body
			// outside a call's answer. Before the probe, whose failed
			// ping would take the session down first and leave this
			// call looking like a bystander.
			// The SDK fails every call in flight with the one error. Over
			// HTTP the call whose own answer went over the bound knows it
			// (its flag), even when the SDK took the session down before
			// the call got here (as it does with the TypeScript SDK's
			// servers); over stdio the first call to get here is told,
			// which may not be the one whose answer was too large.
			own := s.breakSession(sess)
			if s.cfg.URL != "" {
				own = over.Load()
			}
			if !own {
				// The connection was broken by another call's answer (or
				// an oversize notification): this call's own output is
				// not known to be too large.
				return nil, false, ErrUnavailable
			}
			m.log.Warn().Err(err).Str("server", s.cfg.Name).Str("tool", t.Remote).Msg("mcp: a tool's answer is over the bound on one message")
			return msgTooLarge, true, nil
		}
		signal(s.probe)
		return nil, false, err
	}
	if res.IsError {
		metricCalls.WithLabelValues(s.cfg.Name, "tool_error").Inc()
		return errorData(res), true, nil
	}
	metricCalls.WithLabelValues(s.cfg.Name, "ok").Inc()
	return resultData(res), false, nil
}

// callTool is sess.CallTool bounded by ctx. The SDK's write of a request
// to a stdio server does not watch the context: a server that stopped
// reading its stdin blocks the call past its tool_timeout and past the
// client's leaving. The call then returns ctx's error; should it still be
// blocked grace later, stuck is called, and the connection is ended (the
// server's process killed, which fails the blocked writes): the write lock
// it holds would block every later call and ping on it too, each leaving a
// goroutine and its arguments behind, and the keep-alive would never
// notice. A server that is only slow to answer returns at once: the SDK
// waits for an answer on the context.
func callTool(ctx context.Context, sess *mcp.ClientSession, p *mcp.CallToolParams, grace time.Duration, stuck func()) (*mcp.CallToolResult, error) {
	return bounded(ctx, func() (*mcp.CallToolResult, error) { return sess.CallTool(ctx, p) }, grace, stuck)
}

// bounded runs fn on a goroutine of its own and returns its result, or
// ctx's error once ctx ends. Then, if stuck is set, it is called when fn
// has still not returned grace later.
func bounded[T any](ctx context.Context, fn func() (T, error), grace time.Duration, stuck func()) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	var finished atomic.Bool
	go func() {
		defer func() {
			// A panic in fn (the SDK's, on a server's answer) on this
			// goroutine is no request's to recover: it would end the
			// process. It is counted and becomes the call's error.
			if p := recover(); p != nil {
				observe.Panics.Inc()
				finished.Store(true)
				done <- result{err: &panicError{p: p, stack: debug.Stack()}}
			}
		}()
		v, err := fn()
		finished.Store(true)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		if stuck != nil {
			time.AfterFunc(grace, func() {
				if !finished.Load() {
					stuck()
				}
			})
		}
		var zero T
		return zero, ctx.Err()
	}
}

// panicError is the error of a bounded call whose function panicked (a
// bug), with the panic's value and stack for the log.
type panicError struct {
	p     any
	stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("mcpclient: the call panicked: %v", e.p) }

// resultData maps a successful CallToolResult: structured content wins (it
// is the machine-readable form; the text blocks usually repeat it), else the
// text of the blocks.
func resultData(res *mcp.CallToolResult) []byte {
	if res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return b
		}
	}
	return []byte(contentText(res.Content))
}

// msgNoMessage is what the model sees of a tool failure that came
// without a message.
var msgNoMessage = []byte("the tool failed without saying why")

// errorData is the message of a failed CallToolResult: the text of its
// blocks, else its structured content (some servers put the error only
// there), else msgNoMessage: an empty error result tells the model nothing.
func errorData(res *mcp.CallToolResult) []byte {
	if text := contentText(res.Content); strings.TrimSpace(text) != "" {
		return []byte(text)
	}
	if data := resultData(res); len(data) > 0 && string(data) != "null" {
		return data
	}
	return msgNoMessage
}

// contentText joins the blocks of a result as text. Binary blocks (image,
// audio, blob resources) are named, not inlined: the model cannot read
// base64 and it would eat the result size cap.
func contentText(blocks []mcp.Content) string {
	var b strings.Builder
	for _, c := range blocks {
		if b.Len() > 0 {
			b.WriteString("\n")
		}
		switch v := c.(type) {
		case *mcp.TextContent:
			b.WriteString(v.Text)
		case *mcp.ImageContent:
			b.WriteString("[image " + v.MIMEType + ", " + strconv.Itoa(len(v.Data)) + " bytes]")
		case *mcp.AudioContent:
			b.WriteString("[audio " + v.MIMEType + ", " + strconv.Itoa(len(v.Data)) + " bytes]")
		case *mcp.ResourceLink:
			b.WriteString("[resource " + v.URI)
			if v.Description != "" {
				b.WriteString(": " + v.Description)
			}
			b.WriteString("]")
		case *mcp.EmbeddedResource:
			switch {
			case v.Resource == nil:
				b.WriteString("[resource]")
			case v.Resource.Text != "":
				b.WriteString(v.Resource.Text)
			default:
				b.WriteString("[resource " + v.Resource.URI + ", " + strconv.Itoa(len(v.Resource.Blob)) + " bytes]")
			}
		default:
			b.WriteString("[unsupported content]")
		}
	}
	return b.String()
}

// countEnded counts a call whose context ended first: "timeout" when its
// deadline passed (the server's timeout, or the request's), "cancelled"
// when it was cancelled (its client left). A server that hangs on every
// call shows in gateway_mcp_calls_total as such, not as nothing.
func countEnded(ctx context.Context, server string) {
	result := "cancelled"
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		result = "timeout"
	}
	metricCalls.WithLabelValues(server, result).Inc()
}
