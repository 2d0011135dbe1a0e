package proxy

import (
	"strconv"
	"strings"
	"unicode"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/internal/fold"
	"github.com/llmgw/gateway/pipeline"
)

// chatInput is what ingress reads from a chat request body.
type chatInput struct {
	model        string
	stream       bool
	includeUsage bool
	tools        []byte // the top-level "tools" array: a sub-slice of the body
}

// parseChat validates a /v1/chat/completions body once, at ingress. Later
// layers read it with gjson without re-validating. Every failure names the
// offending param.
//
// A top-level key may appear once. gjson (and so every layer here) reads the
// first of two equal keys, while upstreams commonly keep the last and some
// match keys without regard to case: a body with two "model" or two
// "messages" keys would have the policy, the limits and the guardrails judge
// one value and the upstream act on another. So would one "Tools" or
// "Stream" key (misspelt): read as spelt here, as "tools" or "stream" by
// an upstream that matches keys without regard to case.
func parseChat(body []byte) (chatInput, error) {
	var in chatInput
	root, err := pipeline.RequestObject(body) // a view: body is never written and outlives what is read from it
	if err != nil {
		return in, err
	}
	var model, messages, stream, streamOptions, tools, toolChoice gjson.Result
	var top [32]string // a body's top-level keys, most of the time
	keys := keySet{small: top[:], fold: true}
	repeated, inner := "", ""
	var bad error
	root.ForEach(func(k, v gjson.Result) bool {
		if keys.add(k.Str) {
			repeated = k.Str
			return false
		}
		if want := misspelt(k.Str, topSpelling); want != "" {
			bad = misspeltKey("", k.Str, want)
			return false
		}
		if k.Str == "messages" {
			messages = v // checkMessages looks inside, in its own walk
			return true
		}
		// The structure of an OpenAI member is spelt as OpenAI spells it;
		// what another member holds (a provider's own) is not judged.
		var known map[string]string
		if len(v.Raw) > 0 && (v.Raw[0] == '{' || v.Raw[0] == '[') && topNames[k.Str] {
			known = innerSpelling
		}
		if param, key, want := repeatedBelow(v, maxKeyDepth, !clientData[k.Str], known); want != "" {
			bad = misspeltKey(k.Str+param, key, want)
			return false
		} else if key != "" {
			repeated, inner = key, k.Str+param
			return false
		}
		switch k.Str {
		case "model":
			model = v
		case "messages":
			messages = v
		case "stream":
			stream = v
		case "stream_options":
			streamOptions = v
		case "tools":
			tools = v
		case "tool_choice":
			toolChoice = v
		}
		return true
	})
	if bad != nil {
		return in, bad
	}
	if inner != "" {
		return in, repeatedInnerKey(inner, repeated)
	}
	if repeated != "" {
		return in, repeatedKey(repeated)
	}
	switch {
	case !model.Exists():
		return in, pipeline.BadRequest("model", "you must provide a model parameter")
	case model.Type != gjson.String || model.Str == "":
		return in, pipeline.BadRequest("model", "model must be a non-empty string")
	case len(model.Str) > maxModelField:
		return in, pipeline.BadRequest("model", "model must be at most %d bytes", maxModelField)
	}
	in.model = model.Str
	in.tools = arrayIn(body, tools)
	if err := checkToolChoice(toolChoice); err != nil {
		return in, err
	}
	if err := checkMessages(messages); err != nil {
		return in, err
	}
	in.stream, in.includeUsage, err = streamFlags(stream, streamOptions)
	return in, err
}

// checkMessages checks messages: a non-empty array of objects, each with
// a role.
func checkMessages(messages gjson.Result) error {
	switch {
	case !messages.Exists():
		return pipeline.BadRequest("messages", "missing required parameter: 'messages'")
	case !messages.IsArray():
		return pipeline.BadRequest("messages", "messages must be an array")
	}
	n := 0
	var bad error
	messages.ForEach(func(_, m gjson.Result) bool {
		if !m.IsObject() {
			bad = pipeline.BadRequest("messages", "messages[%d] must be an object", n)
			return false
		}
		// One walk of the message's members: its role, and no key given
		// twice in it or in what it holds (repeatedBelow), and none of
		// OpenAI's in another case, in it or in its OpenAI members (what a
		// provider's own member holds is not judged).
		var role gjson.Result
		var few [innerKeys]string
		keys := keySet{small: few[:], fold: true}
		m.ForEach(func(k, v gjson.Result) bool {
			if keys.add(k.Str) {
				bad = repeatedInnerKey("messages["+strconv.Itoa(n)+"]", k.Str)
				return false
			}
			if want := misspelt(k.Str, messageSpelling); want != "" {
				bad = misspeltKey("messages["+strconv.Itoa(n)+"]", k.Str, want)
				return false
			}
			if k.Str == "role" {
				role = v
			}
			var known map[string]string
			if len(v.Raw) > 0 && (v.Raw[0] == '{' || v.Raw[0] == '[') && messageNames[k.Str] {
				known = innerSpelling
			}
			if param, key, want := repeatedBelow(v, maxKeyDepth, !clientData[k.Str], known); want != "" {
				bad = misspeltKey("messages["+strconv.Itoa(n)+"]."+k.Str+param, key, want)
				return false
			} else if key != "" {
				bad = repeatedInnerKey("messages["+strconv.Itoa(n)+"]."+k.Str+param, key)
				return false
			}
			return true
		})
		if bad != nil {
			return false
		}
		if role.Type != gjson.String || role.Str == "" {
			bad = pipeline.BadRequest("messages", "messages[%d].role must be a non-empty string", n)
			return false
		}
		n++
		return true
	})
	if bad != nil {
		return bad
	}
	if n == 0 {
		return pipeline.BadRequest("messages", "messages must contain at least one message")
	}
	return nil
}

// checkToolChoice refuses a tool_choice that is neither a string nor an
// object, or an object of a type OpenAI defines whose parts are not what
// it reads: the tool loop and the policies read the name a function
// choice gives (a number was read as its digits, a missing one as ""),
// and OpenAI refuses such a choice. A string, or an object of another
// type, is the upstream's to judge (Mistral takes "any").
func checkToolChoice(tc gjson.Result) error {
	switch {
	case !tc.Exists() || tc.Type == gjson.Null || tc.Type == gjson.String:
		return nil
	case !tc.IsObject():
		return pipeline.BadRequest("tool_choice", "tool_choice must be a string or an object")
	}
	switch tc.Get("type").Str {
	case "function":
		if n := tc.Get("function.name"); n.Type != gjson.String || n.Str == "" {
			return pipeline.BadRequest("tool_choice.function.name", "Missing required parameter: 'tool_choice.function.name'.")
		}
	case "custom":
		if n := tc.Get("custom.name"); n.Type != gjson.String || n.Str == "" {
			return pipeline.BadRequest("tool_choice.custom.name", "Missing required parameter: 'tool_choice.custom.name'.")
		}
	case "allowed_tools":
		a := tc.Get("allowed_tools")
		if m := a.Get("mode"); !a.IsObject() || m.Type != gjson.String || (m.Str != "auto" && m.Str != "required") {
			return pipeline.BadRequest("tool_choice.allowed_tools.mode", "Invalid 'tool_choice.allowed_tools.mode': expected one of auto, required.")
		}
		if !a.Get("tools").IsArray() {
			return pipeline.BadRequest("tool_choice.allowed_tools.tools", "Invalid 'tool_choice.allowed_tools.tools': expected an array of tools.")
		}
	}
	return nil
}

// streamFlags reads stream (a boolean or null) and stream_options (an
// object, only with stream true).
func streamFlags(stream, options gjson.Result) (on, includeUsage bool, _ error) {
	switch stream.Type {
	case gjson.True:
		on = true
	case gjson.False, gjson.Null: // also absent
	default:
		return false, false, pipeline.BadRequest("stream", "stream must be a boolean")
	}
	if !options.Exists() || options.Type == gjson.Null {
		return on, false, nil
	}
	if !options.IsObject() {
		return on, false, pipeline.BadRequest("stream_options", "stream_options must be an object")
	}
	if !on {
		return on, false, pipeline.BadRequest("stream_options", "stream_options is only allowed when stream is true")
	}
	switch u := options.Get("include_usage"); u.Type {
	case gjson.True:
		return on, true, nil
	case gjson.False, gjson.Null: // also absent
		return on, false, nil
	}
	return on, false, pipeline.BadRequest("stream_options.include_usage", "stream_options.include_usage must be a boolean")
}

// arrayIn returns the array v read from body as a sub-slice of body (no
// copy), or nil when v is not an array of body.
func arrayIn(body []byte, v gjson.Result) []byte {
	if !v.IsArray() || v.Index <= 0 || v.Index+len(v.Raw) > len(body) {
		return nil
	}
	return body[v.Index : v.Index+len(v.Raw)]
}

// keySet holds the keys of one object, compared without regard to case
// when fold (the top level, and the request's structure: upstreams may
// match keys so), else exactly (the client's own data, clientData). The
// common object has a few keys: they stay in small, an array of the
// caller's (on its stack), and an object with more moves them to a map.
type keySet struct {
	small []string // the caller's array; small[:n] are the keys
	n     int
	fold  bool
	big   map[string]struct{}
}

// add records k and reports whether an equal key was already there.
func (s *keySet) add(k string) (repeated bool) {
	if s.big == nil {
		for _, seen := range s.small[:s.n] {
			if seen == k || (s.fold && strings.EqualFold(seen, k)) {
				return true
			}
		}
		if s.n < len(s.small) {
			s.small[s.n] = k // not append: the array stays on the caller's stack
			s.n++
			return false
		}
		s.big = make(map[string]struct{}, 2*len(s.small))
		for _, seen := range s.small {
			s.big[s.norm(seen)] = struct{}{}
		}
	}
	f := s.norm(k)
	if _, ok := s.big[f]; ok {
		return true
	}
	s.big[f] = struct{}{}
	return false
}

func (s *keySet) norm(k string) string {
	if s.fold {
		return fold.Key(k)
	}
	return k
}

// repeatedKey is the 400 for a key given twice. The key is the client's own
// text: it is named only when short.
// repeatedBelow finds an object inside v (v itself included) that gives
// a key twice, or, where keys compare without regard to case (fold), one
// of the keys known spells in another case ("Name" for "name": misspelt):
// the path to it from v (".messages[2]" style, empty for v itself), the
// key, and for a misspelt one its spelling (want); key is empty when there
// is none. Every layer reads
// the first of two keys, the upstream commonly the last: a message with two
// "content" keys had the guardrails judge one text and the model read
// another, a tool with two "name"s the tool policy allow one tool and the
// upstream see another.
//
// It looks maxKeyDepth levels deep, where the request's own structure is
// (a message's content parts and tool calls, a tool's function, each one
// or two levels below a member's value): each level
// reads the bytes below it again, so the work is at most that many times the
// body. Keys compare without regard to case, as upstreams decoding with Go's
// encoding/json match them ("Content" is "content"), except inside the
// client's own data (clientData: a schema's properties "ID" and "id").
const maxKeyDepth = 3

// innerKeys is how many keys of an inner object keySet holds on the stack:
// few, as the request path's stack is what every open stream's goroutine
// keeps (32 there took 512 bytes a level).
const innerKeys = 6

// clientData are the members whose values are the client's own data, not
// the request's structure: their keys compare exactly.
var clientData = map[string]bool{"parameters": true, "properties": true, "schema": true, "metadata": true, "logit_bias": true}

func repeatedBelow(v gjson.Result, depth int, fold bool, known map[string]string) (param, key, want string) {
	if depth == 0 || len(v.Raw) == 0 || (v.Raw[0] != '{' && v.Raw[0] != '[') {
		return "", "", ""
	}
	if v.Raw[0] == '[' {
		i := 0
		v.ForEach(func(_, e gjson.Result) bool {
			if p, k, w := repeatedBelow(e, depth-1, fold, known); k != "" {
				param, key, want = "["+strconv.Itoa(i)+"]"+p, k, w
				return false
			}
			i++
			return true
		})
		return param, key, want
	}
	var few [innerKeys]string
	keys := keySet{small: few[:], fold: fold}
	v.ForEach(func(k, e gjson.Result) bool {
		if keys.add(k.Str) {
			key = k.Str
			return false
		}
		if fold && known != nil {
			if w := misspelt(k.Str, known); w != "" {
				key, want = k.Str, w
				return false
			}
		}
		if p, kk, w := repeatedBelow(e, depth-1, fold && !clientData[k.Str], known); kk != "" {
			param, key, want = "."+k.Str+p, kk, w
			return false
		}
		return true
	})
	return param, key, want
}

// topSpelling, messageSpelling and innerSpelling map the fold.Key of each
// member of an OpenAI chat request, of a message, and of each key of their
// structure (a content part, a tool and its function, a tool call,
// tool_choice, response_format), to its one spelling (misspelt).
var (
	topSpelling = spellings("audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
		"max_completion_tokens", "max_tokens", "messages", "metadata", "modalities", "model", "moderation", "n",
		"parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key", "prompt_cache_options",
		"prompt_cache_retention", "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier",
		"stop", "store", "stream", "stream_options", "temperature", "tool_choice", "tools", "top_logprobs", "top_p",
		"user", "verbosity", "web_search_options")
	topNames        = spelt(topSpelling)
	messageSpelling = spellings("role", "content", "name", "tool_calls", "tool_call_id", "refusal", "function_call", "audio")
	messageNames    = spelt(messageSpelling)
	innerSpelling   = spellings("role", "content", "name", "tool_calls", "tool_call_id", "refusal", "function_call",
		"audio", "type", "text", "image_url", "url", "detail", "input_audio", "data", "format", "file", "file_id",
		"file_data", "filename", "id", "function", "arguments", "custom", "input", "description", "parameters",
		"strict", "mode", "tools", "allowed_tools", "json_schema", "schema", "include_usage", "cache_control")
)

// spelt is the set of the spellings in m.
func spelt(m map[string]string) map[string]bool {
	s := make(map[string]bool, len(m))
	for _, n := range m {
		s[n] = true
	}
	return s
}

func spellings(names ...string) map[string]string {
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[fold.Key(n)] = n
	}
	return m
}

// misspelt returns the spelling of k when k is one of known's keys in
// another case (or with a rune that folds to a letter of it, as the
// Kelvin sign does to "k"), else "".
func misspelt(k string, known map[string]string) string {
	if fold.Plain(k) {
		return "" // lower-case ASCII: a key as spelt, known or not
	}
	return known[fold.Key(k)]
}

// misspeltKey is the 400 for key, in the object at param ("" for the top
// level), spelt otherwise than want. key folds to want, so it is short and
// printable.
func misspeltKey(param, key, want string) error {
	at := param
	if at == "" {
		at = want
	}
	return pipeline.BadRequest(at, "the key %q must be spelt %q: the gateway reads keys as spelt, and an upstream that matches keys without regard to case would read it as %q", key, want, want)
}

// topKeysOnce refuses a body (a valid JSON object) whose top level gives a
// key twice, as parseChat does in its own walk: a Responses request is
// read (translated) by the first of two keys, where its client's JSON
// library, like an upstream's, commonly keeps the last.
func topKeysOnce(body []byte) error {
	var top [32]string
	keys := keySet{small: top[:], fold: true}
	repeated := ""
	gjson.Parse(unsafe.String(unsafe.SliceData(body), len(body))).ForEach(func(k, _ gjson.Result) bool { // a view, not a copy: body is not written while read
		if keys.add(k.Str) {
			repeated = k.Str
			return false
		}
		return true
	})
	if repeated != "" {
		return repeatedKey(repeated)
	}
	return nil
}

// repeatedInnerKey is the 400 for key given twice in the object at param.
func repeatedInnerKey(param, key string) error {
	if len(key) > 64 || strings.ContainsFunc(key, unicode.IsControl) || len(param) > 256 || strings.ContainsFunc(param, unicode.IsControl) {
		return pipeline.BadRequest("", "an object in the request body repeats a key; each key may appear once in an object")
	}
	return pipeline.BadRequest(param, "%s repeats the key %q; each key may appear once in an object", param, key)
}

func repeatedKey(k string) error {
	if len(k) > 64 || strings.ContainsFunc(k, unicode.IsControl) {
		return pipeline.BadRequest("", "the request body repeats a key; each key may appear once")
	}
	return pipeline.BadRequest(k, "%q repeats a key given earlier in the request body (keys are compared without regard to case); each key may appear once", k)
}
