package toolloop

import (
	"bytes"
	"context"
	"fmt"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"io"
	"net/http"

	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/pipeline"
)

// httpDoer is the part of *http.Client the http tools use.
type httpDoer interface {
	Do(*http.Request) (*http.Response, error)
}

// httpTool POSTs the call's arguments JSON to one configured URL. Only that
// URL is ever called: redirects are not followed (see newHTTPClient).
type httpTool struct {
	url      string
	headers  map[string]string
	client   httpDoer
	maxBytes int64
}

func (h *httpTool) run(ctx context.Context, c *pipeline.ToolCall) ([]byte, error) {
	args := c.Arguments
	if len(bytes.TrimSpace(args)) == 0 {
		args = []byte("{}")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(args))
	if err != nil {
		return nil, &ToolError{Kind: "tool_error", Message: "the tool is misconfigured", Detail: err}
	}
	req.Header.Set("Content-Type", "application/json")
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header)) // traceparent, when traced
	req.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.5")
	for k, v := range h.headers {
		req.Header.Set(k, v)
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &ToolError{Kind: "tool_error", Message: "the tool's service is unreachable", Detail: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, h.maxBytes))
	if err != nil {
		return nil, &ToolError{Kind: "tool_error", Message: "reading the tool's response failed", Detail: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &ToolError{Kind: "tool_error", Message: fmt.Sprintf("the tool's service answered HTTP %d", resp.StatusCode),
			Detail: fmt.Errorf("body: %.512s", observe.Secrets.RedactEscaped(body))} // masked before the cut
	}
	if int64(len(body)) == h.maxBytes {
		if sz := sizeOf(ctx); sz != nil {
			sz.n, sz.atLeast = h.answerSize(resp, int64(len(body)))
			sz.cut = sz.n > int64(len(body))
		}
	}
	return body, nil
}

// maxCounted bounds how far past the read cap an answer without a
// Content-Length is read (and discarded) to learn its size.
const maxCounted = 16 << 20

// answerSize returns the size of an answer of which read bytes were read,
// and whether it is only a lower bound: the Content-Length when the service
// sent one, else the count of the rest (up to maxCounted more bytes).
func (h *httpTool) answerSize(resp *http.Response, read int64) (int64, bool) {
	if resp.ContentLength >= read {
		return resp.ContentLength, false
	}
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxCounted))
	return read + n, err != nil || n == maxCounted
}

// newHTTPClient copies base (or a default client) so that redirects are
// returned instead of followed: a tool may only call its configured URL.
func newHTTPClient(base *http.Client) *http.Client {
	var c http.Client
	if base != nil {
		c = *base
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &c
}
