package openapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/observe"
)

// Operation is one operation offered as a server tool. Read-only after
// Parse; safe for concurrent use.
type Operation struct {
	Tool     config.Tool // the tool's definition (Parameters holds the JSON schema)
	method   string
	path     string // the template, "/pet/{petId}"
	base     *url.URL
	headers  map[string]string
	params   []param
	body     bool
	bodyType string
	client   *http.Client
}

// param is one path, query or header parameter: key is its argument's name.
type param struct {
	key, name, in string
	// explode: an object value is sent as one query key per property
	// (OpenAPI's default for a query parameter: style form, explode
	// true); otherwise as its JSON text under the parameter's name.
	explode bool
	// joined: an array value is sent as one key, its values
	// comma-separated (style form, explode false); otherwise as one key
	// per value.
	joined bool
}

// maxAnswer bounds the body of an operation's answer that is read; the tool
// loop caps the result it shows further (tool_loop.max_result_bytes).
const maxAnswer = 1 << 20

// errorBody bounds the part of a non-2xx body an error result quotes.
const errorBody = 512

// request maps args onto the operation's request. Every argument stays
// inside its place: path values are escaped segments (never "." or ".."),
// header values may not hold control characters, and the URL is base_url's.
func (o *Operation) request(ctx context.Context, args []byte) (*http.Request, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		args = []byte("{}")
	}
	if !jsonvalid.Bytes(args) || !gjson.ParseBytes(args).IsObject() {
		return nil, errors.New("the arguments must be a JSON object")
	}
	p := o.path
	q := url.Values{}
	var joined [][2]string // name, escaped value: url.Values would escape the commas
	hdr := http.Header{}
	for _, prm := range o.params {
		v := gjson.GetBytes(args, gjson.Escape(prm.key))
		if !v.Exists() || v.Type == gjson.Null {
			if prm.in == "path" {
				return nil, fmt.Errorf("the path parameter %q is required", prm.key)
			}
			continue
		}
		switch prm.in {
		case "path":
			s := scalar(v)
			if s == "" || s == "." || s == ".." {
				return nil, fmt.Errorf("the path parameter %q may not be empty, \".\" or \"..\"", prm.key)
			}
			p = strings.ReplaceAll(p, "{"+prm.name+"}", url.PathEscape(s))
		case "query":
			switch {
			case v.IsArray() && prm.joined:
				// Each value escaped, so that a comma in one is %2C and
				// only the separators are commas.
				var vs []string
				for _, e := range v.Array() {
					vs = append(vs, url.QueryEscape(scalar(e)))
				}
				if len(vs) > 0 {
					joined = append(joined, [2]string{prm.name, strings.Join(vs, ",")})
				}
			case v.IsArray():
				for _, e := range v.Array() {
					q.Add(prm.name, scalar(e))
				}
			case v.IsObject() && prm.explode:
				// OpenAPI's default query style (form, exploded): each
				// property is a parameter of its own, but not one of
				// another declared parameter's name, which would set that
				// parameter around its schema (an enum, a pattern).
				var clash string
				v.ForEach(func(k, e gjson.Result) bool {
					if o.declaresQuery(k.Str, prm) {
						clash = k.Str
						return false
					}
					q.Add(k.Str, scalar(e))
					return true
				})
				if clash != "" {
					return nil, fmt.Errorf("the property %q of %q names another query parameter", clash, prm.key)
				}
			default:
				q.Set(prm.name, scalar(v))
			}
		case "header":
			s := scalar(v)
			if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) || !utf8.ValidString(s) {
				return nil, fmt.Errorf("the header parameter %q may not hold control characters", prm.key)
			}
			hdr.Set(prm.name, s)
		}
	}
	u := *o.base
	u.Path = strings.TrimRight(o.base.Path, "/") + unescape(p)
	u.RawPath = strings.TrimRight(o.base.EscapedPath(), "/") + p
	// base_url's own query (a function key, an API version) is the
	// operator's: kept, and never replaced by the model's.
	own := o.base.Query()
	base := o.base.Query()
	for k, vs := range q {
		if _, ok := own[k]; !ok {
			base[k] = vs
		}
	}
	u.RawQuery = base.Encode()
	for _, j := range joined {
		if _, ok := own[j[0]]; !ok {
			if u.RawQuery != "" {
				u.RawQuery += "&"
			}
			u.RawQuery += url.QueryEscape(j[0]) + "=" + j[1]
		}
	}
	u.Fragment, u.RawFragment = "", ""
	var body io.Reader
	if o.body {
		if b := gjson.GetBytes(args, bodyKey); b.Exists() {
			body = strings.NewReader(b.Raw)
		}
	}
	req, err := http.NewRequestWithContext(ctx, o.method, u.String(), body)
	if err != nil {
		return nil, err
	}
	if req.URL.Host != o.base.Host || req.URL.Scheme != o.base.Scheme {
		return nil, errors.New("the request would leave base_url")
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	// traceparent, when traced: over a header parameter of its name.
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))
	for k, v := range o.headers { // the operator's headers win over the model's
		req.Header.Set(k, v)
	}
	if body != nil {
		req.Header.Set("Content-Type", o.bodyType)
	}
	req.Header.Set("Accept", "application/json, text/plain;q=0.9, */*;q=0.5")
	return req, nil
}

// unescape is p with its escapes decoded, for url.URL.Path (RawPath keeps
// them).
func unescape(p string) string {
	if s, err := url.PathUnescape(p); err == nil {
		return s
	}
	return p
}

// declaresQuery reports whether a query parameter of o other than self is
// named name, in any case and with or without a trailing "[]" (servers
// that read ?Tag= or ?tag[]= as tag).
func (o *Operation) declaresQuery(name string, self param) bool {
	name = strings.TrimSuffix(name, "[]")
	for _, p := range o.params {
		if p.in == "query" && strings.EqualFold(strings.TrimSuffix(p.name, "[]"), name) && p.key != self.key {
			return true
		}
	}
	return false
}

// scalar is a value as a parameter string: strings as they are, other JSON
// as its text.
func scalar(v gjson.Result) string {
	if v.Type == gjson.String {
		return v.Str
	}
	return v.Raw
}

// Call runs the operation: JSON answers are the data as JSON, others as
// text; a non-2xx answer is a tool error carrying the status and the start
// of the body.
func (o *Operation) Call(ctx context.Context, args []byte) (data []byte, isError bool, err error) {
	req, err := o.request(ctx, args)
	if err != nil {
		return []byte(err.Error()), true, nil
	}
	resp, err := o.client.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return nil, false, err
	}
	cut := len(b) > maxAnswer
	if cut {
		// Not inside a secret: the masking that follows finds only whole
		// ones, and would leave the start of one the cut split.
		b = b[:observe.Secrets.SafeCut(b, maxAnswer)]
		for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
			if utf8.RuneStart(b[len(b)-i]) {
				if !utf8.FullRune(b[len(b)-i:]) {
					b = b[:len(b)-i] // a rune the cut split
				}
				break
			}
		}
	}
	if resp.StatusCode/100 != 2 {
		msg := "HTTP " + strconv.Itoa(resp.StatusCode)
		// Masked before the cut: a secret the cut splits would be no
		// longer whole, and its start would be shown.
		b = observe.Secrets.RedactEscaped(b)
		if t := strings.TrimSpace(string(b[:min(len(b), errorBody)])); t != "" {
			msg += ": " + strings.ToValidUTF8(t, "")
		}
		return []byte(msg), true, nil
	}
	if len(b) == 0 {
		return []byte(`{"status":` + strconv.Itoa(resp.StatusCode) + `}`), false, nil
	}
	if cut {
		// A prefix: never valid as the JSON it was, and the model must
		// know it lacks the rest.
		note := fmt.Sprintf("\n\n[the answer was cut here: it is larger than %d bytes]", maxAnswer)
		return []byte(strings.ToValidUTF8(string(b), "\uFFFD") + note), false, nil
	}
	if jsonvalid.Bytes(b) {
		return b, false, nil
	}
	return []byte(strings.ToValidUTF8(string(b), "\uFFFD")), false, nil // the loop quotes text
}
