// Package guardrails checks the text of a request at four stages (the
// request's messages, the answer, a server tool's arguments and its
// result) with [[guardrails]] of four kinds (regex, pii, max_length, http)
// and acts on what they find: block, redact or flag. Which guardrails apply
// is chosen per tenant by [[policies]] guardrails and, for the tool
// stages, per tool by the guardrail's tools globs.
//
// Matched text is never logged, traced or shown: only the guardrail's
// name, stage and action.
package guardrails

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path"
	"regexp"
	"slices"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
)

// The stages a guardrail checks.
const (
	StageRequest    = "request"
	StageResponse   = "response"
	StageToolInput  = "tool_input"
	StageToolOutput = "tool_output"
)

// The actions.
const (
	actionBlock  = "block"
	actionRedact = "redact"
	actionFlag   = "flag"
)

// guard is one compiled [[guardrails]] entry; read-only, shared.
type guard struct {
	name, stage, kind, action string
	detectors                 []detector // regex and pii
	maxLen                    int
	repl                      []byte
	window                    int
	tools                     []string
	http                      *classifier
}

// span is one match in a text, by the guard that found it.
type span struct {
	start, end int
	g          *guard
}

func compile(c config.Guardrail, client *http.Client) (*guard, error) {
	g := &guard{name: c.Name, stage: c.Stage, kind: c.Kind, action: c.Action, maxLen: c.MaxLength,
		repl: []byte(c.Replacement), window: c.Window, tools: c.Tools}
	switch c.Kind {
	case "regex":
		for _, p := range c.Patterns {
			re, err := regexp.Compile(p)
			if err != nil {
				return nil, err
			}
			g.detectors = append(g.detectors, detector{re: re})
		}
	case "pii":
		for _, k := range c.PII {
			d, ok := piiDetectors[k]
			if !ok {
				return nil, fmt.Errorf("unknown pii kind %q", k)
			}
			g.detectors = append(g.detectors, d)
		}
	case "http":
		g.http = &classifier{url: c.URL, headers: c.Headers, timeout: c.Timeout.D(), failOpen: c.Fail == "open", client: client, name: c.Name, stage: c.Stage}
	}
	return g, nil
}

// appliesToTool reports whether a tool-stage guard checks the tool name.
func (g *guard) appliesToTool(name string) bool {
	if len(g.tools) == 0 {
		return true
	}
	return slices.ContainsFunc(g.tools, func(p string) bool { ok, _ := path.Match(p, name); return ok })
}

// find appends the spans of g's detectors in text to dst; regions is
// scratch space, returned for reuse.
func (g *guard) find(text []byte, dst []span, regions []int) ([]span, []int) {
	for _, d := range g.detectors {
		if d.pre != nil && !d.pre(text) {
			continue
		}
		if d.regions == nil {
			dst = d.match(text, 0, dst, g)
			continue
		}
		regions = d.regions(text, regions[:0])
		for i := 0; i+1 < len(regions); i += 2 {
			dst = d.match(text[regions[i]:regions[i+1]], regions[i], dst, g)
		}
	}
	return dst, regions
}

// match appends d's valid matches in text, shifted by off.
func (d *detector) match(text []byte, off int, dst []span, g *guard) []span {
	for _, m := range d.re.FindAllIndex(text, -1) {
		if m[1] > m[0] && (d.valid == nil || d.valid(text[m[0]:m[1]])) {
			dst = append(dst, span{off + m[0], off + m[1], g})
		}
	}
	return dst
}

// classifier is the http kind: it POSTs the text and reads {"flagged": bool}.
type classifier struct {
	url, name, stage string
	headers          map[string]string
	timeout          time.Duration
	failOpen         bool
	client           *http.Client
}

// maxVerdict bounds the classifier's answer.
const maxVerdict = 64 << 10

// flagged asks the classifier about text. A timeout or any failure is
// flagged when the guard fails closed.
func (c *classifier) flagged(ctx context.Context, text []byte) bool {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	body := jsonstring.Append([]byte(`{"text":`), string(text))
	body = append(body, `,"stage":`...)
	body = jsonstring.Append(body, c.stage)
	body = append(body, `,"guardrail":`...)
	body = jsonstring.Append(body, c.name)
	body = append(body, '}')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return !c.failOpen
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return !c.failOpen
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxVerdict))
	if err != nil {
		return !c.failOpen
	}
	return c.verdict(resp.StatusCode, b)
}

// verdict reads the classifier's answer, status and body: the boolean
// top-level "flagged" of a 2xx JSON body; anything else is the guard's
// fail mode.
func (c *classifier) verdict(status int, b []byte) bool {
	if status/100 != 2 || !jsonvalid.Bytes(b) {
		return !c.failOpen
	}
	v := gjson.GetBytes(b, "flagged")
	if v.Type != gjson.True && v.Type != gjson.False {
		return !c.failOpen
	}
	return v.Bool()
}
