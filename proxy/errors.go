package proxy

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/sse"
)

// envelope is a mapped error, ready to write: the HTTP status and the OpenAI
// error JSON {"error":{"message","type","param","code"}} with all four keys.
type envelope struct {
	status     int
	body       []byte
	retryAfter time.Duration
	permanent  bool // x-should-retry: false
	logStatus  int  // 499 when the client went away
}

// statusClientClosed is the status logged for a client that went away
// (nginx's 499); the client, gone, is never sent it.
const statusClientClosed = 499

// mapError is the one place that turns an error into HTTP. Internal error
// text never reaches the client: only pipeline.Error messages (written for
// clients) and the message of an upstream's own OpenAI-style envelope.
func mapError(err error) envelope {
	var pe *pipeline.Error
	var ue *pipeline.UpstreamError
	var se *pipeline.SideEffectsError
	switch {
	case errors.As(err, &se):
		env := mapError(se.Err)
		env.permanent = true
		return env
	case errors.As(err, &pe):
		return envelope{status: pe.Status, body: errorJSON(pe.Message, pe.Type, pe.Param, pe.Code),
			retryAfter: pe.RetryAfter, permanent: permanentStatus(pe.Status) ||
				pe.Code == pipeline.CodeInsufficientQuota || pe.Code == pipeline.CodeTooLargeForLimit, // no wait makes these pass
			logStatus: pe.Status}
	case errors.As(err, &ue):
		return mapUpstream(ue)
	case errors.Is(err, pipeline.ErrClientGone) || errors.Is(err, context.Canceled):
		return envelope{status: statusClientClosed, body: errorJSON("client closed request", pipeline.TypeInvalidRequest, "", pipeline.CodeClientClosed), logStatus: statusClientClosed}
	case errors.Is(err, context.DeadlineExceeded):
		return envelope{status: http.StatusGatewayTimeout, body: errorJSON("the request exceeded its deadline", pipeline.TypeTimeout, "", pipeline.CodeTimeout), logStatus: http.StatusGatewayTimeout}
	default:
		return envelope{status: http.StatusInternalServerError, body: errorJSON("internal error", pipeline.TypeServer, "", pipeline.CodeInternal), logStatus: http.StatusInternalServerError}
	}
}

// permanentStatus reports whether an answer of status is one a retry of
// the same request does not change: a 4xx other than 408, 409 and 429.
// The gateway's own and an upstream's relayed alike (x-should-retry: false).
func permanentStatus(status int) bool {
	return status >= 400 && status < 500 && status != http.StatusRequestTimeout &&
		status != http.StatusConflict && status != http.StatusTooManyRequests
}

func mapUpstream(ue *pipeline.UpstreamError) envelope {
	switch ue.Kind {
	case pipeline.UpstreamStatus:
		msg, typ, param, code := "upstream error", pipeline.TypeUpstream, "", ""
		e := gjson.GetBytes(ue.Body, "error")
		if !e.IsObject() && gjson.GetBytes(ue.Body, "object").Str == "error" {
			e = gjson.ParseBytes(ue.Body) // {"object":"error","message":...}: the error is the body
		}
		if e.IsObject() {
			// The upstream's envelope was written for API clients; keep its
			// meaning-bearing fields, bounded in size. A key of the
			// gateway's, quoted back by the upstream, is masked before the
			// cut: a key the cut split would be a prefix no longer masked.
			msg = redactCut(ue.Messages.ClientText(e.Get("message").String()), 1024)
			typ = orDefault(redactCut(e.Get("type").String(), 64), typ)
			param = redactCut(ue.Messages.ClientParam(e.Get("param").String()), 64)
			code = redactCut(e.Get("code").String(), 64)
		} else if text := plainError(ue.Body); text != "" {
			msg = redactCut(ue.Messages.ClientText(text), 1024)
		}
		if msg == "" {
			msg = "upstream returned status " + strconv.Itoa(ue.Status)
		}
		status := ue.Status
		if status < 400 || status > 599 {
			status = http.StatusBadGateway
		}
		if status == http.StatusUnauthorized || status == http.StatusForbidden || status == http.StatusProxyAuthRequired || aboutCredentials(typ, code) {
			// About the gateway's own provider key, not the client's: keep
			// the status (clients see the upstream's verdict) but never its
			// message, which may quote key fragments.
			msg, typ, param, code = credentialsMessage, pipeline.TypeUpstreamAuth, "", pipeline.CodeUpstreamAuth
		} else if status == http.StatusTooManyRequests || aboutRateLimit(typ, code) {
			// About the gateway's one provider account, which every tenant
			// shares: the provider's text names the account (its org id) and
			// counts its use (limit, used, requested), which would show a
			// tenant the others' traffic, as its x-ratelimit headers would.
			msg, param = rateLimitMessage(typ, code), ""
		}
		// A spent quota does not pass with a wait: SDKs are told not to retry.
		spent := strings.EqualFold(code, pipeline.CodeInsufficientQuota) || strings.EqualFold(typ, pipeline.TypeInsufficientQuota)
		return envelope{status: status, body: errorJSON(msg, typ, param, code), retryAfter: ue.RetryAfter, logStatus: status, permanent: spent || permanentStatus(status)}
	case pipeline.UpstreamTimeout, pipeline.UpstreamIdle:
		return serverEnvelope(http.StatusGatewayTimeout, "upstream timed out", pipeline.CodeUpstreamTimeout)
	case pipeline.UpstreamCut:
		if errors.Is(ue.Err, pipeline.ErrNoContent) {
			// A whole answer with nothing in it: no connection was cut.
			return serverEnvelope(http.StatusBadGateway, "upstream answered without any content", pipeline.CodeUpstreamCut)
		}
		return serverEnvelope(http.StatusBadGateway, "upstream closed the connection before the response was complete", pipeline.CodeUpstreamCut)
	case pipeline.UpstreamMalformed:
		if errors.Is(ue.Err, pipeline.ErrResponseTooLarge) || errors.Is(ue.Err, sse.ErrEventTooLarge) {
			return serverEnvelope(http.StatusBadGateway, "upstream response exceeds the gateway's size limit", pipeline.CodeUpstreamResponseTooLarge)
		}
		return serverEnvelope(http.StatusBadGateway, "upstream sent a malformed response", pipeline.CodeUpstreamMalformed)
	default:
		return serverEnvelope(http.StatusBadGateway, "upstream unreachable", pipeline.CodeUpstreamUnreachable)
	}
}

// plainError returns the text of an upstream error body in a shape other
// than OpenAI's envelope, "" when it has none: {"error":"text"} (servers
// that write the error as a string), or FastAPI's {"detail":"text"} and
// {"detail":[{"loc":[...],"msg":"text"}]} (its validation errors: the
// first, after where it was).
func plainError(body []byte) string {
	if e := gjson.GetBytes(body, "error"); e.Type == gjson.String {
		return e.Str
	}
	d := gjson.GetBytes(body, "detail")
	if d.Type == gjson.String {
		return d.Str
	}
	first := d.Get("0")
	msg := first.Get("msg")
	if msg.Type != gjson.String || msg.Str == "" {
		return ""
	}
	var loc []byte // body.messages[3].content: an index as the client's message map reads it (ClientText)
	n := 0
	first.Get("loc").ForEach(func(_, v gjson.Result) bool {
		switch v.Type {
		case gjson.Number:
			loc = append(append(append(loc, '['), v.Raw...), ']')
		case gjson.String:
			if len(loc) > 0 {
				loc = append(loc, '.')
			}
			loc = append(loc, v.Str...)
		default:
			return true
		}
		n++
		return n < 8
	})
	if len(loc) == 0 {
		return msg.Str
	}
	return string(loc) + ": " + msg.Str
}

// redactCut returns s with secrets masked, cut to at most n bytes; a mask
// the cut would split goes whole.
func redactCut(s string, n int) string {
	r := redactString(s)
	out := truncate(r, n)
	if len(out) < len(r) {
		for k := min(len(observe.Mask)-1, len(out)); k > 0; k-- {
			if strings.HasSuffix(out, observe.Mask[:k]) && strings.HasPrefix(r[len(out)-k:], observe.Mask) {
				return out[:len(out)-k]
			}
		}
	}
	return out
}

// redactString masks the secrets of an upstream's error text, and the
// providers' addresses (observe.UpstreamAddrs).
func redactString(s string) string {
	if s == "" {
		return s
	}
	return string(observe.UpstreamAddrs.RedactSecrets(observe.Secrets.Redact([]byte(s))))
}

// credentialsMessage is the gateway's text for an upstream error about the
// gateway's own provider key, in place of the provider's.
const credentialsMessage = "the upstream provider rejected the gateway's credentials"

// rateLimitMessage is the gateway's text for an upstream error about the
// provider account's rate limits (or its quota, when typ or code says so),
// in place of the provider's.
func rateLimitMessage(typ, code string) string {
	if strings.EqualFold(code, "insufficient_quota") || strings.EqualFold(typ, "insufficient_quota") {
		return "the upstream provider's quota for the gateway's account is exhausted"
	}
	return "the upstream provider is rate limiting the gateway's requests; retry later"
}

// aboutRateLimit reports whether an upstream error's type or code says it
// is about the provider account's rate limits or quota, whatever its
// status (an error event in a stream has none).
func aboutRateLimit(typ, code string) bool {
	switch strings.ToLower(code) {
	case "rate_limit_exceeded", "insufficient_quota", "rate_limit_error":
		return true
	}
	return strings.EqualFold(typ, "rate_limit_error") || strings.EqualFold(typ, "insufficient_quota")
}

// aboutCredentials reports whether an upstream error's type or code says
// it is about the credentials the gateway sent, whatever its status: an
// error event in a stream comes with none (the stream's status was 200).
func aboutCredentials(typ, code string) bool {
	switch strings.ToLower(typ) {
	case "authentication_error", "permission_error", "invalid_authentication":
		return true
	}
	switch strings.ToLower(code) {
	case "invalid_api_key", "invalid_authentication", "invalid_organization", "invalid_project", "unauthorized", "permission_denied", "authentication_error":
		return true
	}
	return false
}

// serverEnvelope is a server_error envelope of the gateway's own.
func serverEnvelope(status int, msg, code string) envelope {
	return envelope{status: status, body: errorJSON(msg, pipeline.TypeServer, "", code), logStatus: status}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 { // keep whole runes
		n--
	}
	return s[:n]
}

// errorJSON builds the envelope; empty param and code are written as null.
func errorJSON(message, typ, param, code string) []byte {
	b := []byte(`{"error":{"message":"","type":"","param":null,"code":null}}`)
	b, _ = sjson.SetBytes(b, "error.message", message)
	b, _ = sjson.SetBytes(b, "error.type", typ)
	if param != "" {
		b, _ = sjson.SetBytes(b, "error.param", param)
	}
	if code != "" {
		b, _ = sjson.SetBytes(b, "error.code", code)
	}
	return b
}
