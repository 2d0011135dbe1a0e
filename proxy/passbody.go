package proxy

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
)

// maxModelField bounds a model name a client sends (a JSON body's model, a
// multipart body's model field): an unconfigured name passed through keys
// the limits' state and the usage records, which must not grow with what a
// client chooses to send.
const maxModelField = 256

// passBody is a pass-through request body after policy: either bytes (body)
// or a bounded stream of the client's upload (upload), the model it names
// (configured names only, for metric labels) and the provider to use ("" =
// the default provider).
type passBody struct {
	body     []byte
	upload   *uploadReader
	model    string
	provider string
	// native: a Responses API request the pipeline serves itself
	// (Runtime.servesResponses), a create or an input_tokens count; body
	// is as the tenant policy left it.
	native bool
	tenant *pipeline.Tenant
	// metered: a POST to a model endpoint, whose answer's usage is charged
	// (exchange.call's Charge). estimate: without a reported usage, the
	// body is a JSON body whose tokens estimate the call's input.
	metered  bool
	estimate bool
	// record: a POST /v1/responses passed through, whose answer's
	// response id and output items are recorded as tenant's
	// (ownerRecord). recordItems: a retrieval or cancellation of a
	// response of tenant's, whose answer's output items are.
	record      bool
	recordItems bool
}

// passthroughBody reads, checks and routes a pass-through body. JSON and
// multipart bodies are read whole (bounded by limit) so that the model they
// name passes the tenant's policy before anything goes upstream; any other
// body streams through an uploadReader bounded by the same limit. The
// request's hold on its tenant's limits goes to x.call.
func (s *Server) passthroughBody(ctx *fasthttp.RequestCtx, x *exchange, t *pipeline.Tenant, path string, limit int) (passBody, error) {
	rt := x.rt
	f := formOf(&ctx.Request.Header)
	if cl := ctx.Request.Header.ContentLength(); !f.json && (cl > 0 || cl == -1) && rt.ResponseOwners != nil && underResponses(path) {
		return passBody{}, refuseForm(path)
	}
	if f.opaque() {
		return opaqueBody(ctx, x, t, path, limit)
	}
	var pb passBody
	if err := encodedBody(&ctx.Request.Header, path); err != nil {
		// The model, the token fields and the texts are judged in the
		// bytes as sent: an upstream that decodes the body would read
		// another one.
		return pb, err
	}
	body, err := readBody(ctx, limit)
	if err != nil {
		return pb, err
	}
	if len(body) == 0 && !(ctx.IsPost() && needsModel(rt, path)) {
		// No body, whatever its Content-Type says (an SDK sends
		// application/json on every DELETE): nothing to read a model
		// from, passed through as a request without one is.
		if err := admitOpaque(x, t, path); err != nil {
			return pb, err
		}
		return pb, nil
	}
	model, err := f.model(body)
	if err != nil {
		return pb, err
	}
	if model == "" && ctx.IsPost() && f.json && (path == inputTokensRoute || path == responsesRoute && demoDefault(rt)) {
		if err := namesModel(body, path == responsesRoute); err != nil {
			return pb, err
		}
	}
	route := rt.Routes[model]
	if model != "" && route == nil && !rt.Config.Server.PassthroughUnknownModels {
		return pb, modelNotFound(model)
	}
	if route != nil {
		pb.model = model // only configured names become metric labels
	}
	var req *pipeline.Request
	if rt.Policy != nil {
		// Meta: the limits report the tenant's x-ratelimit-* into it (Limit).
		req = &pipeline.Request{ID: x.id, Start: x.start, Body: body, Model: model, Route: route, Endpoint: path, Meta: &x.meta}
		if err := rt.Policy.Admit(t, req); err != nil {
			return pb, err
		}
		body = req.Body
	}
	if ctx.IsPost() && f.json && path == responsesRoute {
		// A background response answers "queued" with no usage, and its
		// usage comes with a later GET that no one charges: limits and
		// budgets would never see what it spends. Refused, as the
		// gateway's own Responses API refuses it (responses.Request).
		bg, err := onlyMembers(gjson.ParseBytes(body), "background")
		if err != nil {
			return pb, err
		}
		if v := bg[0]; v.Exists() && v.Type != gjson.Null && v.Type != gjson.False {
			return pb, pipeline.BadRequest("background", "background is not supported by this gateway")
		}
	}
	if ctx.IsPost() && f.json && rt.servesResponses(model) {
		if responsesCollection(path) && rt.Policy != nil && !rt.Policy.AllowsPath(t, responsesRoute) {
			// Served here, a collection is part of the tenant's
			// /v1/responses, as a stored response is.
			return pb, pathNotAllowed(responsesRoute)
		}
		switch path {
		case responsesRoute:
			// The pipeline serves it: its limits layer admits it, once.
			// What is stored and echoed of it is redacted first.
			if req != nil {
				if err := rt.Policy.Redact(t, req); err != nil {
					return pb, err
				}
				body = req.Body
			}
			pb.body, pb.native = body, true
			return pb, nil
		case inputTokensRoute:
			// Answered here without a model call: a request to the
			// limits, as any pass-through request is.
			if req != nil {
				if x.call, err = rt.Policy.Limit(req); err != nil {
					return pb, err
				}
			}
			pb.body, pb.native = body, true
			return pb, nil
		case compactRoute:
			return pb, compactUnsupported(model)
		}
	}
	if responsesCollection(path) && rt.Policy != nil && !rt.Policy.AllowsPath(t, path) {
		// Passed through, a collection is the provider's endpoint of its
		// own, on the tenant's allow-list by its own path (passTarget).
		return pb, pathNotAllowed(path)
	}
	if f.json && rt.ResponseOwners != nil && underResponses(path) {
		// The provider keeps what this request names or creates under the
		// gateway's one account (passowner.go).
		if err := s.checkOwnedBody(rt, tenantName(t), body); err != nil {
			return pb, err
		}
		pb.record = ctx.IsPost() && len(path) == len(responsesRoute)
	}
	if req != nil {
		if f.json {
			// The chat pipeline's guardrails never see this body: the
			// same request-stage checks, here.
			if err := rt.Policy.Guard(t, req); err != nil {
				return pb, err
			}
			body = req.Body
		} else if rt.Policy.ModelEndpoint(path) {
			// A form's prompt (an image edit's, a transcription's) is
			// judged as a JSON body's is.
			if err := guardForm(rt.Policy, t, req, f.boundary); err != nil {
				return pb, err
			}
			body = req.Body
		}
		if x.call, err = rt.Policy.Limit(req); err != nil {
			return pb, err
		}
		if ctx.IsPost() && (rt.Policy.ModelEndpoint(path) || path == compactRoute) {
			// A call of a model (a compaction is one): metered. A
			// retrieval (a stored response, a batch) may carry the usage
			// of a call charged already.
			pb.metered, pb.estimate = true, f.json
		}
	}
	pb.provider, pb.body, err = routeBody(f, body, model, route)
	return pb, err
}

// opaqueBody is a pass-through body that is neither JSON nor a form: sent
// as it is, streamed when fasthttp streams it. A model endpoint refuses it
// (a lenient upstream parses any body as JSON: a model endpoint's body is
// judged here or not sent at all).
func opaqueBody(ctx *fasthttp.RequestCtx, x *exchange, t *pipeline.Tenant, path string, limit int) (passBody, error) {
	if err := admitOpaque(x, t, path); err != nil {
		return passBody{}, err
	}
	if cl := ctx.Request.Header.ContentLength(); cl > limit {
		return passBody{}, tooLarge(limit) // the handler drops a moderate excess (discardUnread)
	}
	if !ctx.Request.IsBodyStream() {
		return passBody{body: ctx.Request.Body()}, nil // fasthttp's buffer lives until the handler's writer ends
	}
	return passBody{upload: &uploadReader{r: ctx.RequestBodyStream(), max: int64(limit)}}, nil
}

// admitOpaque admits a pass-through request whose body names no model (an
// opaque body, or none): a model endpoint refuses it; any other passes the
// tenant's request limits.
func admitOpaque(x *exchange, t *pipeline.Tenant, path string) error {
	rt := x.rt
	if rt.Policy == nil {
		return nil
	}
	if rt.Policy.ModelEndpoint(path) {
		return pipeline.Invalid(http.StatusUnsupportedMediaType, pipeline.CodeUnsupportedMediaType,
			"%s takes application/json or multipart/form-data.", truncate(path, 200))
	}
	// No model to judge, but the tenant's request limits still apply.
	req := &pipeline.Request{ID: x.id, Start: x.start, Endpoint: path, Meta: &x.meta}
	if err := rt.Policy.Admit(t, req); err != nil {
		return err
	}
	var err error
	x.call, err = rt.Policy.Limit(req)
	return err
}

// demoDefault reports whether a pass-through request that names no model
// goes to a demo model (a mock provider), which serves no API but chat.
func demoDefault(rt *Runtime) bool {
	for _, p := range rt.Config.Providers {
		if p.Name == rt.Config.Server.DefaultProvider {
			return p.Kind == "mock"
		}
	}
	return false
}

// namesModel refuses a count of a Responses API request's input tokens
// that names no model (the gateway counts with the model's tokenizer; passed
// through, such a count was refused as a path the caller may not use), and
// a create (prompt) that names no model and no stored prompt (whose model
// OpenAI uses) where the default provider is a demo model (demoDefault),
// which echoed it back. An upstream that serves one model answers such a
// create with it, as any pass-through request that names none.
func namesModel(body []byte, prompt bool) error {
	root, err := pipeline.RequestObject(body)
	if err != nil {
		return err
	}
	if p := root.Get("prompt"); prompt && p.Exists() && p.Type != gjson.Null {
		return nil
	}
	return pipeline.BadRequest("model", "you must provide a model parameter")
}

// needsModel reports whether a POST to path must name its model in its
// body: a model endpoint's, or a Responses API collection's (input_tokens,
// compact). Such a POST with an empty JSON body is refused as malformed,
// as it always was; any other empty body is no body (passthroughBody).
// Without a policy every POST keeps that rule.
func needsModel(rt *Runtime, path string) bool {
	return rt.Policy == nil || rt.Policy.ModelEndpoint(path) || responsesCollection(path)
}

// routeBody sends body to route's first deployment: its provider, and the
// body naming the deployment's upstream model where that is not model. No
// route (an unknown model passed through, or none named) sends body as it
// is to the default provider ("").
func routeBody(f bodyForm, body []byte, model string, route *pipeline.Route) (provider string, _ []byte, _ error) {
	if route == nil || len(route.Deployments) == 0 {
		return "", body, nil
	}
	d := route.Deployments[0]
	if d.Upstream == model {
		return d.Provider, body, nil
	}
	body, err := f.setModel(body, d.Upstream)
	if err != nil {
		return "", nil, pipeline.BadRequest("model", "cannot route the request")
	}
	return d.Provider, body, nil
}

// bodyForm is how a pass-through body is read: JSON, a multipart form
// (boundary set), or neither (opaque).
type bodyForm struct {
	json     bool
	boundary string // a multipart/form-data body's
}

func formOf(h *fasthttp.RequestHeader) bodyForm {
	media, params, _ := mime.ParseMediaType(string(h.ContentType()))
	f := bodyForm{json: media == "application/json" || strings.HasSuffix(media, "+json")}
	if media == "multipart/form-data" {
		f.boundary = params["boundary"]
	}
	return f
}

func (f bodyForm) opaque() bool { return !f.json && f.boundary == "" }

// model returns the model body names ("" for none).
func (f bodyForm) model(body []byte) (string, error) {
	if f.boundary != "" {
		return formModel(body, f.boundary)
	}
	return jsonModel(body)
}

// setModel returns body naming model instead.
func (f bodyForm) setModel(body []byte, model string) ([]byte, error) {
	if f.boundary != "" {
		return setFormModel(body, f.boundary, model)
	}
	return sjson.SetBytes(body, "model", model)
}

// jsonModel validates a JSON body and returns the model it names ("" for
// none). A second or escaped "model" key is refused: the policy and a
// lenient upstream must read the same one.
func jsonModel(body []byte) (string, error) {
	if !jsonvalid.Bytes(body) {
		return "", pipeline.InvalidJSON(body)
	}
	if !utf8.Valid(body) {
		// JSON text is UTF-8, as on the chat and Responses routes
		// (pipeline.RequestObject): a broken byte would reach the
		// provider, and the guardrails and the masking read the text.
		return "", pipeline.NotUTF8()
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return "", nil // not ours to judge; the upstream answers
	}
	// Some upstreams match keys without regard to case and keep the last:
	// "MODEL" or an escaped "model" is a second model.
	m, err := onlyMembers(root, "model")
	if err != nil {
		return "", err
	}
	model := m[0]
	switch {
	case !model.Exists() || model.Type == gjson.Null:
		return "", nil
	case model.Type != gjson.String || model.Str == "":
		return "", pipeline.BadRequest("model", "model must be a non-empty string")
	case len(model.Str) > maxModelField:
		return "", pipeline.BadRequest("model", "model must be at most %d bytes", maxModelField)
	}
	return model.Str, nil
}

// formModel returns the value of the model field of a multipart body ("" for
// none); a second model field is refused. A field name in another case
// ("MODEL") is a model field too: as with a JSON body's keys (jsonModel),
// some upstreams match names without regard to case, and the policy must
// judge the model they read.
func formModel(body []byte, boundary string) (string, error) {
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	model, found := "", false
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			return model, nil
		}
		if err != nil {
			return "", pipeline.BadRequest("", "the multipart body is malformed")
		}
		if !strings.EqualFold(p.FormName(), "model") {
			continue
		}
		if found {
			return "", pipeline.BadRequest("model", "model must appear once")
		}
		b, err := io.ReadAll(io.LimitReader(p, maxModelField+1))
		if err != nil || len(b) > maxModelField {
			return "", pipeline.BadRequest("model", "the model field is malformed")
		}
		model, found = string(b), true
		if model == "" {
			return "", pipeline.BadRequest("model", "model must be a non-empty string")
		}
	}
}

// guardedFormFields are the fields of a multipart body that a model reads
// as text: the names the guardrails judge in a JSON pass-through body.
var guardedFormFields = []string{"prompt", "suffix", "input", "instructions"}

// guardedField returns the guarded field a form field name is, matched
// as the model field is (strings.EqualFold, formModel says why), or "".
func guardedField(name string) string {
	for _, f := range guardedFormFields {
		if strings.EqualFold(name, f) {
			return f
		}
	}
	return ""
}

// guardForm runs t's request-stage guardrails (Policy.Guard) over each
// guarded field of r's multipart body, each judged as the JSON body
// {"<name>": "<text>"} would be; a redaction rewrites that field in
// r.Body, every other part unchanged.
func guardForm(p Policy, t *pipeline.Tenant, r *pipeline.Request, boundary string) error {
	mr := multipart.NewReader(bytes.NewReader(r.Body), boundary)
	var edits map[int]string // part index → the text to send instead
	for i := 0; ; i++ {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return pipeline.BadRequest("", "the multipart body is malformed")
		}
		name := part.FormName()
		key := guardedField(name) // judged as the name the guardrails know
		if key == "" {
			continue
		}
		text, err := io.ReadAll(part)
		if err != nil {
			return pipeline.BadRequest(name, "the multipart body is malformed")
		}
		obj := append(jsonstring.Append(append(jsonstring.Append([]byte{'{'}, key), ':'), string(text)), '}')
		judged := string(obj) // the JSON form replaces invalid UTF-8: only a guard's change is an edit
		jr := &pipeline.Request{ID: r.ID, Start: r.Start, Body: obj, Model: r.Model, Route: r.Route, Endpoint: r.Endpoint, Meta: r.Meta}
		if err := p.Guard(t, jr); err != nil {
			return err
		}
		if string(jr.Body) != judged {
			v := gjson.GetBytes(jr.Body, gjson.Escape(key)).String()
			if edits == nil {
				edits = map[int]string{}
			}
			edits[i] = v
		}
	}
	if edits == nil {
		return nil
	}
	body, err := rewriteForm(r.Body, boundary, func(i int, _ *multipart.Part) (string, bool) {
		v, ok := edits[i]
		return v, ok
	})
	if err != nil {
		return pipeline.BadRequest("", "the multipart body is malformed")
	}
	r.Body = body
	return nil
}

// setFormModel returns a copy of the multipart body with its model field set
// to model, every other part unchanged, under the same boundary.
func setFormModel(body []byte, boundary, model string) ([]byte, error) {
	return rewriteForm(body, boundary, func(_ int, p *multipart.Part) (string, bool) {
		return model, strings.EqualFold(p.FormName(), "model")
	})
}

// rewriteForm returns a copy of the multipart body under the same
// boundary, with the content of each part (by index) for which set
// reports true replaced by what it returns, every other part unchanged.
func rewriteForm(body []byte, boundary string, set func(i int, p *multipart.Part) (string, bool)) ([]byte, error) {
	var out bytes.Buffer
	out.Grow(len(body) + 256)
	w := multipart.NewWriter(&out)
	if err := w.SetBoundary(boundary); err != nil {
		return nil, err
	}
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	for i := 0; ; i++ {
		p, err := r.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		dst, err := w.CreatePart(textproto.MIMEHeader(p.Header))
		if err != nil {
			return nil, err
		}
		if v, ok := set(i, p); ok {
			_, err = io.WriteString(dst, v)
		} else {
			_, err = io.Copy(dst, p)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// uploadReader streams a client's upload to the upstream, bounded by max
// bytes, and remembers why it stopped when the fault is the client's: a body
// over the limit (413) or a read that failed (a slow or broken upload, 408).
// Used by the one goroutine fasthttp's client writes the request from.
type uploadReader struct {
	r   io.Reader
	n   int64
	max int64
	err error // the client's fault, for the error mapper
}

func (u *uploadReader) Read(p []byte) (int, error) {
	if u.err != nil {
		return 0, u.err
	}
	if rem := u.max + 1 - u.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := u.r.Read(p)
	u.n += int64(n)
	switch {
	case u.n > u.max:
		u.err = tooLarge(int(u.max))
		return 0, u.err
	case err != nil && !errors.Is(err, io.EOF):
		u.err = pipeline.Invalid(http.StatusRequestTimeout, pipeline.CodeRequestTimeout, "The request body could not be read in time.")
		return n, u.err
	}
	return n, err
}

// encodedBody is the 415 of a request to path whose body has a
// Content-Encoding (other than identity), or nil. The gateway decodes no
// request body: it judges the bytes as sent.
func encodedBody(h *fasthttp.RequestHeader, path string) error {
	if ce := h.Peek(fasthttp.HeaderContentEncoding); len(ce) > 0 && !bytes.EqualFold(bytes.TrimSpace(ce), []byte("identity")) {
		return pipeline.Invalid(http.StatusUnsupportedMediaType, pipeline.CodeUnsupportedMediaType,
			"%s takes a JSON or multipart body without Content-Encoding.", truncate(path, 200))
	}
	return nil
}
