package policies

import (
	"strings"

	"github.com/llmgw/gateway/pipeline"
)

// DefaultPassthrough is the pass-through allow-list of a tenant whose policy
// sets none: the stateless endpoints that call a model named in the body,
// which therefore pass the same model, size and token checks as chat.
// Endpoints that reach state shared by everyone behind the provider key
// (files, batches, uploads, vector stores, assistants, fine-tuning, the
// organisation's admin API) are left out: one tenant could read or delete
// another's. An operator opts a tenant into them explicitly.
var DefaultPassthrough = []string{
	"/v1/completions",
	"/v1/responses",
	"/v1/embeddings",
	"/v1/moderations",
	"/v1/audio/speech",
	"/v1/audio/transcriptions",
	"/v1/audio/translations",
	"/v1/images/generations",
	"/v1/images/edits",
	"/v1/images/variations",
}

// tokenCap names, for an endpoint, the request fields that bound the
// output length, the one set to the cap when a request sets none, and the
// fields that multiply it: each of n choices (and each of completions'
// best_of candidates) may run to the token field's value. others are the
// OpenAI API's token fields of the other endpoints, which a lenient
// upstream reads here too (a vLLM or llama.cpp server takes
// max_completion_tokens on completions): under a cap they are refused, as
// otherTokenFields are.
type tokenCap struct {
	fields  []string
	set     string
	choices []string
	others  []string
}

// tokenCaps maps each endpoint whose body asks a model for output to its
// token fields. An endpoint not listed has no output budget to cap
// (embeddings, moderations, audio, images).
var tokenCaps = map[string]tokenCap{
	pipeline.ChatEndpoint: {fields: []string{fieldMaxTokens, fieldMaxCompletionTokens}, set: fieldMaxCompletionTokens, choices: []string{fieldN},
		others: []string{fieldMaxOutputTokens}},
	"/v1/completions": {fields: []string{fieldMaxTokens}, set: fieldMaxTokens, choices: []string{fieldN, fieldBestOf},
		others: []string{fieldMaxCompletionTokens, fieldMaxOutputTokens}},
	"/v1/responses": {fields: []string{fieldMaxOutputTokens}, set: fieldMaxOutputTokens,
		others: []string{fieldMaxTokens, fieldMaxCompletionTokens}},
}

// AllowsPath reports whether the tenant t may use the pass-through path
// (canonical form, "/v1/..."). A nil policy allows the default list.
func (e *Engine) AllowsPath(t *pipeline.Tenant, path string) bool {
	p := PolicyOf(t)
	if p == nil {
		p = e.Policy("*")
	}
	return p.paths.match(path)
}

// AllowsModel reports whether the tenant t may use the client-facing model.
func (e *Engine) AllowsModel(t *pipeline.Tenant, model string) bool {
	return PolicyOf(t).AllowsModel(model)
}

// RestrictsModels reports whether t's policy limits the models it may use:
// such a tenant must name an allowed model in every model-calling body.
func (e *Engine) RestrictsModels(t *pipeline.Tenant) bool {
	p := PolicyOf(t)
	return p != nil && p.models != nil && !p.models.all
}

// BodyLimit returns t's request body limit in bytes, or 0 for the server's.
func (e *Engine) BodyLimit(t *pipeline.Tenant) int {
	if p := PolicyOf(t); p != nil {
		return p.MaxBodyBytes
	}
	return 0
}

// Admit applies t's policy to a request outside the chat pipeline (a
// pass-through body): the same body size, model allow-list and token caps as
// chat, through the same Policy.Admit. A body that names no model passes
// the size check and its endpoint's token cap (an upstream may answer it
// with a default model), and is refused at a model endpoint
// (DefaultPassthrough) for a tenant limited to some models: that tenant must
// name one, or the upstream would pick a model the allow-list never saw.
func (e *Engine) Admit(t *pipeline.Tenant, r *pipeline.Request) error {
	r.Tenant = t
	p := PolicyOf(t)
	if r.Model != "" || r.Route != nil {
		return p.Admit(r)
	}
	if e.RestrictsModels(t) && isModelEndpoint(r.Endpoint) {
		return pipeline.BadRequest("model", "you must provide a model parameter")
	}
	if p == nil {
		return nil
	}
	if p.MaxBodyBytes > 0 && len(r.Body) > p.MaxBodyBytes {
		return tooLarge(len(r.Body), p.MaxBodyBytes)
	}
	if err := p.storedRefs(r); err != nil {
		return err
	}
	// No model named, yet the upstream may answer with its default one:
	// the endpoint's token cap applies all the same.
	return p.capBody(r)
}

// ModelEndpoint reports whether path is one of the stateless model
// endpoints, whose body names the model it calls.
func (e *Engine) ModelEndpoint(path string) bool { return isModelEndpoint(path) }

func isModelEndpoint(path string) bool {
	for _, m := range DefaultPassthrough {
		if strings.EqualFold(path, m) {
			return true
		}
	}
	return false
}

// endpointCap returns the token fields of r's endpoint; ok is false when the
// endpoint has no output budget.
func endpointCap(endpoint string) (tokenCap, bool) {
	if endpoint == "" {
		endpoint = pipeline.ChatEndpoint
	}
	c, ok := tokenCaps[strings.ToLower(endpoint)]
	return c, ok
}
