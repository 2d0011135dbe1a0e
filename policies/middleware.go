package policies

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unsafe"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/wire"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Middleware returns the request-layer middleware: it authenticates
// req.Credential and sets req.Tenant (unless the route set it, having
// authenticated the same credential), and enforces the tenant's body size limit
// (413), model allow-list (403) and max_tokens cap (clamp, or 400) before
// calling next. A clamped body is a new slice stored in req.Body; the old one
// is never written. Denials return a *pipeline.Error without calling next.
// The returned Handler is safe for concurrent use.
func (e *Engine) Middleware() pipeline.Middleware {
	return func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			t := r.Tenant // authenticated already by the route, when set
			if t == nil {
				var err error
				if t, err = e.Authenticate(r.Credential); err != nil {
					return nil, err
				}
				r.Tenant = t
			}
			if err := PolicyOf(t).Admit(r); err != nil {
				return nil, err
			}
			return next.Chat(ctx, r)
		})
	}
}

// Admit applies p's request limits to r: model, body size, the stored
// objects it names (storedRefs), then max_tokens.
// It may replace r.Body with a new slice (clamp mode) and returns a
// *pipeline.Error for a denial. A nil Policy admits everything.
func (p *Policy) Admit(r *pipeline.Request) error {
	if p == nil {
		return nil
	}
	model := r.Model
	if model == "" && r.Route != nil {
		model = r.Route.Name
	}
	if !p.models.match(model) {
		// As for a model no route has (judged before this policy): a 403,
		// or a check of this policy's before this one, would tell this key
		// that another key may use it.
		return pipeline.ModelNotFound(model)
	}
	if p.MaxBodyBytes > 0 && len(r.Body) > p.MaxBodyBytes {
		return tooLarge(len(r.Body), p.MaxBodyBytes)
	}
	if err := p.storedRefs(r); err != nil {
		return err
	}
	return p.capBody(r)
}

// capBody applies p's max_tokens cap to r's body when r's endpoint has
// token fields (clamp or 400; a body that is not a JSON object is refused
// there). It may replace r.Body.
func (p *Policy) capBody(r *pipeline.Request) error {
	if p.MaxTokens > 0 {
		if c, ok := endpointCap(r.Endpoint); ok {
			if !isJSONObject(r.Body) {
				// A form's token fields are ones this check cannot read,
				// and an upstream might.
				endpoint := r.Endpoint
				if endpoint == "" {
					endpoint = pipeline.ChatEndpoint
				}
				return pipeline.Invalid(http.StatusUnsupportedMediaType, pipeline.CodeUnsupportedMediaType,
					"%s takes a JSON object under this API key's max_tokens limit.", endpoint)
			}
			body, err := p.capTokens(r.Body, c)
			if err != nil {
				return err
			}
			r.Body = body
		}
	}
	return nil
}

func tooLarge(n, max int) error {
	return pipeline.TooLarge("Request body is %d bytes, above this key's limit of %d bytes.", n, max)
}

// isJSONObject reports whether body starts like a JSON object (a
// multipart pass-through body is not).
func isJSONObject(body []byte) bool {
	for _, c := range body {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c == '{'
	}
	return false
}

// The request fields the max_tokens cap applies to.
const (
	fieldMaxTokens           = "max_tokens"
	fieldMaxCompletionTokens = "max_completion_tokens"
	fieldMaxOutputTokens     = "max_output_tokens"
	fieldN                   = "n"
	fieldBestOf              = "best_of"
)

// otherTokenFields bound the output under another name than the OpenAI
// API's, which some upstreams read before it: llama.cpp's n_predict wins
// over max_tokens, Ollama's num_predict and Hugging Face TGI's
// max_new_tokens are theirs. Under a cap they are refused: the cap would
// bound a field the upstream does not read.
var otherTokenFields = []string{"n_predict", "num_predict", "max_new_tokens"}

func otherTokenField(key string) bool { return named(key, otherTokenFields) }

// named reports whether key is one of names, compared as Go's
// encoding/json compares them.
func named(key string, names []string) bool {
	for _, f := range names {
		if strings.EqualFold(key, f) {
			return true
		}
	}
	return false
}

// capTokens enforces p.MaxTokens on the token-limit fields c names (for
// chat: max_tokens and max_completion_tokens). A field of another name that
// bounds the output (otherTokenFields) is a 400.
//
// A field above the cap is lowered to it (clamp) or rejected with a 400
// naming the field (reject). A request that sets neither field would let the
// model run to its own maximum and bypass the cap, so it gets
// c.set = cap in both modes (for chat max_completion_tokens, the field
// every current OpenAI model accepts). A field that is not a number,
// is below 1 (-1 means no limit to llama.cpp and Ollama), is not an integer,
// appears twice or has an escaped name or another case ("MAX_TOKENS":
// Go's encoding/json reads it as max_tokens) is a 400: a lenient upstream
// could otherwise read a value this check did not (a numeric string, the
// last of two duplicates).
//
// The cap bounds the request's output, not one choice's: max_tokens is per
// choice, so n = 8 under a cap of C would otherwise get 8×C tokens. The
// choice fields c names (n, and completions' best_of, which generates that
// many candidates) share the cap: each choice gets C / n (rounded down),
// and the token fields are checked, lowered or set against that. n = 1
// (or absent) leaves the cap as it was; n above C, which leaves a choice
// less than a token, is a 400 naming n. The choice fields follow the token
// fields' rules (one integer >= 1; null is 1).
// body is not modified; a rewrite returns a new slice.
func (p *Policy) capTokens(body []byte, c tokenCap) ([]byte, error) {
	fields := c.fields
	limit := float64(p.MaxTokens)
	var count [2]int
	var seen, over [2]bool
	var num [2]float64
	var raw [2]string
	bad, below, alias := "", "", "" // alias: a field of otherTokenFields
	var choiceCount [2]int
	choices, choiceRaw, tooMany := 1.0, "", "" // the most choices a field asks for
	// One pass over the top-level keys instead of one gjson.Get per field:
	// the messages usually come first and dominate the body. The string view
	// aliases body, which nobody writes (pipeline.Request rules), and no
	// Result outlives this function except raw, which is only formatted.
	json := unsafe.String(unsafe.SliceData(body), len(body))
	gjson.Parse(json).ForEach(func(k, v gjson.Result) bool {
		if otherTokenField(k.Str) || named(k.Str, c.others) {
			alias = k.Str
			return false
		}
		name, counted := "", 0
		i := -1
		for j, f := range fields {
			if strings.EqualFold(k.Str, f) {
				i, name = j, f
				count[j]++
				counted = count[j]
			}
		}
		ci := -1
		for j, f := range c.choices {
			if strings.EqualFold(k.Str, f) {
				ci, name = j, f
				choiceCount[j]++
				counted = choiceCount[j]
			}
		}
		if name == "" {
			return true
		}
		switch {
		case counted > 1 || k.Str != name || len(k.Raw) != len(name)+2:
			bad = name
			return false
		case v.Type == gjson.Null:
		case !wire.Integer(v):
			bad = name
			return false
		case v.Num < 1:
			// -1 is "no limit" to llama.cpp and Ollama (n_predict,
			// num_predict): it would bypass the cap. OpenAI refuses it too.
			below = name
			return false
		case ci >= 0:
			if v.Num > choices {
				choices, choiceRaw = v.Num, v.Raw
				if v.Num > limit {
					tooMany = name
				}
			}
		default:
			seen[i], num[i], raw[i] = true, v.Num, v.Raw
		}
		return true
	})
	if alias != "" {
		return nil, pipeline.BadRequest(alias, "'%s' is not accepted under this API key's max_tokens limit; use '%s'.", alias, c.set)
	}
	if bad != "" {
		return nil, pipeline.BadRequest(bad, "Invalid '%s': expected one integer value.", bad)
	}
	if below != "" {
		e := pipeline.Invalid(http.StatusBadRequest, pipeline.CodeIntegerBelowMin,
			"Invalid '%s': integer below minimum value. Expected a value >= 1.", below)
		e.Param = below
		return nil, e
	}
	if tooMany != "" {
		e := pipeline.Invalid(http.StatusBadRequest, pipeline.CodeIntegerAboveMax,
			"Invalid '%s': integer above maximum value. Expected a value <= %d (this API key's max_tokens limit, shared by the choices), but got %s instead.",
			tooMany, p.MaxTokens, choiceRaw)
		e.Param = tooMany
		return nil, e
	}
	// Each choice's share of the cap; choices <= limit, so it is >= 1.
	perChoice := int64(math.Floor(limit / choices))
	for i := range fields {
		over[i] = seen[i] && num[i] > float64(perChoice)
	}
	if p.MaxTokensMode == ModeReject {
		for i := range over {
			if over[i] {
				shared := ""
				if choices > 1 {
					shared = " (this API key's max_tokens limit of " + strconv.Itoa(p.MaxTokens) + " shared by " + choiceRaw + " choices)"
				}
				e := pipeline.Invalid(http.StatusBadRequest, pipeline.CodeIntegerAboveMax,
					"Invalid '%s': integer above maximum value. Expected a value <= %d%s, but got %s instead.",
					fields[i], perChoice, shared, raw[i])
				e.Param = fields[i]
				return nil, e
			}
		}
	}
	set := ""
	if !seen[0] && !seen[1] {
		set = c.set
	}
	out := body
	for i, f := range fields {
		if !over[i] && f != set {
			continue
		}
		b, err := sjson.SetBytes(out, fields[i], perChoice)
		if err != nil {
			// Unreachable for a body validated at ingress; fail closed.
			e := pipeline.BadRequest("", "The request body is not a JSON object.")
			e.Err = err
			return nil, e
		}
		out = b
	}
	return out, nil
}
