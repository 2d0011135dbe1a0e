package policies

import (
	"bytes"
	"slices"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

// A request can name objects the provider stores for the gateway's one
// account instead of carrying their bytes: a file (a chat file part's
// file_id, a Responses input_file or input_image, an image edit's images
// or mask, a code interpreter container's file_ids, the files a vector
// store or a container is made of), vector stores (a file_search tool's
// vector_store_ids), a code interpreter container, a conversation
// (Responses' conversation) and a stored audio answer (an assistant
// message's audio.id). The provider resolves those ids across the account,
// whoever created them: a tenant that names one reads another tenant's
// object, through the model or through an object of its own made of it.
// The endpoints of those objects are opt-in per tenant (DefaultPassthrough
// leaves them out), so a request may name an object of a kind only when
// its tenant may use that kind's endpoint. (Response ids and items are
// scoped by owner instead: the gateway records who created each.)

// refKind is a kind of stored object a request may name, and the
// pass-through path that reaches its objects.
type refKind struct {
	what, path string
}

var (
	refFile         = &refKind{"stored files", "/v1/files"}
	refVectorStore  = &refKind{"vector stores", "/v1/vector_stores"}
	refContainer    = &refKind{"containers", "/v1/containers"}
	refConversation = &refKind{"conversations", "/v1/conversations"}
	// An audio answer's id names no endpoint of its own; the audio is a
	// file of the account's, as far as the policy goes.
	refAudio = &refKind{"stored audio answers", "/v1/files"}
)

// maxRefDepth bounds how deep the walk for references goes: the deepest
// reference (a saved prompt variable's file, an input item's part) is
// about 4 levels down.
const maxRefDepth = 10

// refSkips are members whose values name no stored object though they may
// hold one's member names: JSON schemas (a tool's parameters, a structured
// output's schema, whose properties, examples and defaults may be called
// file_id), metadata, an MCP tool's headers, and what a Responses turn
// replayed as input carries about files it cited or searched (annotations,
// a file search's results), which the model does not load. Under names the
// client chose (a saved prompt's variables) nothing is skipped.
var refSkips = []string{"parameters", "schema", "json_schema", "input_schema", "response_format", "format",
	"metadata", "headers", "annotations", "results"}

// refFileMembers name a file by its id as a string: a fine-tuning job's
// files (its endpoint is opt-in; the files are the account's).
var refFileMembers = []string{"training_file", "validation_file"}

// refKeys are byte strings one of which a body that names a stored object
// other than through an id member holds (idKey finds those), compared
// without regard to case (hasFold), as an upstream written in Go reads
// member names; `\u` because a key may be spelt with escapes, which the
// walk reads decoded. A chat body can name only files and audio answers.
var (
	chatRefKeys = []string{`"audio"`}
	refKeys     = []string{`"audio"`, `"container"`, `"conversation"`, `_file"`}
)

// mayRefer reports whether body can name a stored object: false for a
// body without any of the members that do (the common case, found by a
// few byte searches, fewer on chat).
func mayRefer(body []byte, chat bool) bool {
	if idKey(body) || bytes.Contains(body, []byte(`\u`)) ||
		// The two characters Go's encoding/json folds onto ASCII letters
		// (ſ to s, the Kelvin sign to k), as the walk does: the searches
		// below fold ASCII only.
		bytes.Contains(body, []byte("ſ")) || bytes.Contains(body, []byte("\u212a")) {
		return true
	}
	keys := refKeys
	if chat {
		keys = chatRefKeys
	}
	for _, k := range keys {
		if hasFold(body, k) {
			return true
		}
	}
	return false
}

// hasFold reports whether body holds key in any case of its letters. key
// is lower case, and starts and ends with a byte that has no case ('"' or
// '_'). It looks from each place key's last letter and last byte are, in
// either case of the letter (a byte search for a pair rare in JSON, such
// as o" for "audio"), and compares backwards from there.
func hasFold(body []byte, key string) bool {
	n := len(key)
	for _, letter := range [2]byte{key[n-2], key[n-2] - 'a' + 'A'} {
		tail := [2]byte{letter, key[n-1]}
		for i := 0; ; {
			j := bytes.Index(body[i:], tail[:])
			if j < 0 {
				break
			}
			end := i + j + 2
			if end >= n && body[end-n] == key[0] && foldedBefore(body, end-1, key[1:n-1]) {
				return true
			}
			i = end - 1
		}
	}
	return false
}

// idKey reports whether body holds file_id, file_ids or vector_store_ids,
// in any case, looking only at its underscores (tool_call_id, call_id and
// the like, in every tool-using conversation, do not count).
func idKey(body []byte) bool {
	for i := 0; ; i++ {
		j := bytes.IndexByte(body[i:], '_')
		if j < 0 || i+j+2 >= len(body) {
			return false
		}
		i += j
		if body[i+1]|0x20 != 'i' || body[i+2]|0x20 != 'd' {
			continue
		}
		if foldedBefore(body, i, "file") || foldedBefore(body, i, "store") {
			return true
		}
	}
}

// foldedBefore reports whether the bytes of body just before i are word,
// in any case (word is lower case letters).
func foldedBefore(body []byte, i int, word string) bool {
	if i < len(word) {
		return false
	}
	for k := range len(word) {
		if body[i-len(word)+k]|0x20 != word[k] {
			return false
		}
	}
	return true
}

// storedRefs refuses r when it names a stored object of a kind its tenant
// may not reach (403 path_not_allowed, param the member). Member names
// compare without regard to case, as an upstream decoding with Go's
// encoding/json reads them.
func (p *Policy) storedRefs(r *pipeline.Request) error {
	if p == nil || !mayRefer(r.Body, r.Endpoint == "" || r.Endpoint == pipeline.ChatEndpoint) {
		return nil
	}
	root := gjson.ParseBytes(r.Body)
	if !root.IsObject() {
		return nil
	}
	kind, path := walkRefs(root, 0, true, func(k *refKind) bool { return p.paths.match(k.path) })
	if kind == nil {
		return nil
	}
	slices.Reverse(path)
	param := strings.Join(path, ".")
	param = strings.ReplaceAll(param, ".[", "[")
	e := pipeline.Forbidden(pipeline.CodePathNotAllowed,
		"This API key may not refer to %s (%s): %s is not among the paths it may use.", kind.what, param, kind.path)
	e.Param = param
	return e
}

// walkRefs follows v, a value depth levels down, for a stored object of a
// kind not allowed; it returns the kind and the path to the member
// (innermost first), or nil. skips: members named in refSkips are passed
// over. Nothing is allocated until one is found.
func walkRefs(v gjson.Result, depth int, skips bool, allowed func(*refKind) bool) (*refKind, []string) {
	if depth > maxRefDepth {
		return nil, nil
	}
	switch {
	case v.IsArray():
		var kind *refKind
		var path []string
		i := 0
		v.ForEach(func(_, e gjson.Result) bool {
			if kind, path = walkRefs(e, depth+1, skips, allowed); kind != nil {
				path = append(path, "["+strconv.Itoa(i)+"]")
			}
			i++
			return kind == nil
		})
		return kind, path
	case !v.IsObject():
		return nil, nil
	}
	var kind *refKind
	var path []string
	v.ForEach(func(k, m gjson.Result) bool {
		key := k.Str
		switch {
		case skips && slices.ContainsFunc(refSkips, func(s string) bool { return strings.EqualFold(s, key) }):
		case depth == 1 && strings.EqualFold(key, "variables") && m.IsObject():
			// A saved prompt's variables: names the client chose.
			kind, path = walkRefs(m, depth+1, false, allowed)
		case slices.ContainsFunc(refFileMembers, func(s string) bool { return strings.EqualFold(s, key) }) && m.Type == gjson.String:
			if !allowed(refFile) {
				kind = refFile
			}
		case strings.EqualFold(key, "file_id") || strings.EqualFold(key, "file_ids"):
			if (m.Type == gjson.String || m.IsArray() && len(m.Array()) > 0) && !allowed(refFile) {
				kind = refFile
			}
		case strings.EqualFold(key, "vector_store_ids"):
			if m.IsArray() && len(m.Array()) > 0 && !allowed(refVectorStore) {
				kind = refVectorStore
			}
		case depth == 0 && strings.EqualFold(key, "conversation") && (m.Type == gjson.String || m.IsObject()):
			if !allowed(refConversation) {
				kind = refConversation
			}
		case strings.EqualFold(key, "container") && m.Type == gjson.String:
			if !allowed(refContainer) {
				kind = refContainer
			}
		case strings.EqualFold(key, "audio") && hasMemberFold(m, "id"):
			// An assistant message's stored audio answer: {"id": ...}.
			if !allowed(refAudio) {
				kind, path = refAudio, []string{"id"}
			}
		default:
			kind, path = walkRefs(m, depth+1, skips, allowed)
		}
		if kind != nil {
			path = append(path, key)
		}
		return kind == nil
	})
	return kind, path
}

// hasMemberFold reports whether object m has a member named name (lower
// case) in any case, as Go's encoding/json would read it.
func hasMemberFold(m gjson.Result, name string) bool {
	found := false
	m.ForEach(func(k, _ gjson.Result) bool {
		found = strings.EqualFold(k.Str, name)
		return !found
	})
	return found
}
