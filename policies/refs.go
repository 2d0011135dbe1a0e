package policies

import (
	"bytes"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

// A model request can name objects the provider stores for the gateway's
// one account instead of carrying their bytes: a file (a chat file part's
// file_id, a Responses input_file or input_image, an image edit's images,
// a code interpreter container's file_ids), vector stores (a file_search
// tool's vector_store_ids), a code interpreter container, a conversation
// (Responses' conversation) and a stored audio answer (an assistant
// message's audio.id). The provider resolves those ids across the account,
// whoever created them: a tenant that names one reads another tenant's
// object through the model. The endpoints of those objects are opt-in per
// tenant (DefaultPassthrough leaves them out), so a request may name an
// object of a kind only when its tenant may use that kind's endpoint.
// (Response ids and items are scoped by owner instead: the gateway records
// who created each.)

// refKind is a kind of stored object a request may name, and the
// pass-through path that reaches its objects.
type refKind struct {
	what, path string
}

var (
	refFile         = refKind{"stored files", "/v1/files"}
	refVectorStore  = refKind{"vector stores", "/v1/vector_stores"}
	refContainer    = refKind{"containers", "/v1/containers"}
	refConversation = refKind{"conversations", "/v1/conversations"}
	// An audio answer's id names no endpoint of its own; the audio is a
	// file of the account's, as far as the policy goes.
	refAudio = refKind{"stored audio answers", "/v1/files"}
)

// maxRefDepth bounds how deep the walk for references goes: the deepest
// reference (an input item's content part) is 4 levels down.
const maxRefDepth = 8

// mayRefer reports whether body can name a stored object: false for a
// body without any of the members that do (the common case, found by a
// few byte searches).
func mayRefer(body []byte) bool {
	for _, k := range refKeys {
		if bytes.Contains(body, k) {
			return true
		}
	}
	return false
}

var refKeys = [][]byte{[]byte(`"file_id`), []byte(`"vector_store_ids"`), []byte(`"container"`), []byte(`"conversation"`), []byte(`"audio"`)}

// storedRefs refuses r when it names a stored object of a kind its tenant
// may not reach (403 path_not_allowed, param the member).
func (p *Policy) storedRefs(r *pipeline.Request) error {
	if p == nil || !mayRefer(r.Body) {
		return nil
	}
	root := gjson.ParseBytes(r.Body)
	if !root.IsObject() {
		return nil
	}
	var err error
	check := func(k refKind, param string) bool {
		if !p.paths.match(k.path) {
			err = pipeline.Forbidden(pipeline.CodePathNotAllowed,
				"This API key may not refer to %s (%s): %s is not among the paths it may use.", k.what, param, k.path)
			err.(*pipeline.Error).Param = param
		}
		return err == nil
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "conversation":
			if v.Type == gjson.String || v.IsObject() {
				return check(refConversation, "conversation")
			}
		case "messages":
			return walkMessages(v, check)
		case "input", "tools", "images", "prompt":
			// Where the others are: input items and their parts, tools,
			// an image edit's images, a saved prompt's variables. Schemas,
			// metadata and the like are not walked: a string named file_id
			// there is no reference.
			return walkRefs(v, k.Str, 1, check)
		}
		return true
	})
	return err
}

// walkMessages finds an assistant message's stored audio answer
// (audio.id) in chat messages, and the files below them.
func walkMessages(msgs gjson.Result, check func(refKind, string) bool) bool {
	if !msgs.IsArray() {
		return true
	}
	i := 0
	ok := true
	msgs.ForEach(func(_, m gjson.Result) bool {
		param := "messages[" + strconv.Itoa(i) + "]"
		i++
		if a := m.Get("audio"); a.IsObject() && a.Get("id").Exists() {
			if ok = check(refAudio, param+".audio.id"); !ok {
				return false
			}
		}
		ok = walkRefs(m, param, 2, check)
		return ok
	})
	return ok
}

// walkRefs follows v (at param, depth levels down) for the members that
// name stored objects.
func walkRefs(v gjson.Result, param string, depth int, check func(refKind, string) bool) bool {
	if depth > maxRefDepth || (!v.IsObject() && !v.IsArray()) {
		return true
	}
	ok := true
	if v.IsArray() {
		i := 0
		v.ForEach(func(_, e gjson.Result) bool {
			ok = walkRefs(e, param+"["+strconv.Itoa(i)+"]", depth+1, check)
			i++
			return ok
		})
		return ok
	}
	v.ForEach(func(k, m gjson.Result) bool {
		at := param + "." + k.Str
		switch k.Str {
		case "file_id", "file_ids":
			if m.Type == gjson.String || (m.IsArray() && len(m.Array()) > 0) {
				ok = check(refFile, at)
			}
		case "vector_store_ids":
			if m.IsArray() && len(m.Array()) > 0 {
				ok = check(refVectorStore, at)
			}
		case "container":
			if m.Type == gjson.String {
				ok = check(refContainer, at)
				return ok
			}
			ok = walkRefs(m, at, depth+1, check) // {"type":"auto","file_ids":[...]}
		default:
			ok = walkRefs(m, at, depth+1, check)
		}
		return ok
	})
	return ok
}
