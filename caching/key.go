package caching

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
)

// keyVersion changes whenever the projection or the entry format changes, so
// old entries in a shared Redis are never misread.
const keyVersion = "v1"

// ignoredFields are request members that never change the answer: transport
// (stream, stream_options), attribution (user, metadata, safety_identifier),
// provider-side caching and storage hints, and the client's model name
// (replaced by the route and its resolved upstream model: appendResolvedModel).
// Every other member, known or not, is part of the key: a field we do not
// understand may change the answer, so it must not produce a false hit.
var ignoredFields = map[string]bool{
	"model":                  true,
	"stream":                 true,
	"stream_options":         true,
	"user":                   true,
	"metadata":               true,
	"safety_identifier":      true,
	"prompt_cache_key":       true,
	"prompt_cache_retention": true,
	"prompt_cache_options":   true,
	"store":                  true,
	"service_tier":           true,
	"request_id":             true,
}

// appendResolvedModel appends what answers (each name quoted, so the
// parts cannot run into each other): the route (the configured model the
// client named) and the deployment's provider and upstream name, else the
// client's name. The route counts, not only its upstream: two models of one
// upstream model may differ in what they answer with (the server tools
// offered to each, tool selection, prompted tool calling, fallbacks).
func appendResolvedModel(dst []byte, r *pipeline.Request) []byte {
	if r.Route != nil {
		dst = jsonstring.Append(append(dst, "route"...), r.Route.Name)
	} else {
		dst = jsonstring.Append(append(dst, "client"...), r.Model)
	}
	if t := r.TargetOrDefault(); t != nil {
		dst = jsonstring.Append(dst, t.Provider)
		dst = jsonstring.Append(dst, t.Upstream)
	}
	return dst
}

// requestKey returns the cache key of r: a namespace ("tenant:<name>:" or
// "shared:") and the hex SHA-256 of the canonical projection of the body.
// The hash part has a fixed size whatever the payload.
func requestKey(r *pipeline.Request, toolSet string, shared bool) string {
	c := getCanon()
	c.buf = append(c.buf, keyVersion...)
	c.buf = append(c.buf, 0)
	c.buf = appendResolvedModel(c.buf, r)
	c.buf = append(c.buf, 0)
	c.buf = jsonstring.Append(c.buf, toolSet)
	c.buf = append(c.buf, 0)
	if r.LimitToolCalls {
		// The Responses API's max_tool_calls, which its translation to
		// chat carries beside the body: it decides which server calls run.
		c.buf = strconv.AppendInt(append(c.buf, "max_tool_calls"...), int64(r.MaxToolCalls), 10)
		c.buf = append(c.buf, 0)
	}
	head := len(c.buf)
	// The top-level object, minus the ignored members, canonicalised like
	// any other object.
	start := len(c.pairs)
	gjson.ParseBytes(r.Body).ForEach(func(k, v gjson.Result) bool {
		if key := unquote(k); !ignoredFields[key] {
			return c.push(key, v)
		}
		return true
	})
	c.sortedMembers(start)
	if c.over {
		// Too many members to sort (maxMembers): the body's own text, after
		// a byte no canonical form has there. Such a body hits only its
		// exact repeat.
		c.buf = append(append(c.buf[:head], 0), r.Body...)
	}
	sum := sha256.Sum256(c.buf)
	putCanon(c)

	var ns string
	switch {
	case shared:
		ns = "shared:"
	case r.Tenant != nil:
		ns = "tenant:" + r.Tenant.Name + ":"
	default:
		ns = "tenant::"
	}
	out := make([]byte, len(ns)+hex.EncodedLen(len(sum)))
	copy(out, ns)
	hex.Encode(out[len(ns):], sum[:])
	return string(out)
}
