package proxy

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/llmgw/gateway/pipeline"
)

// maxDecodeRounds bounds how many layers of percent-encoding a path may
// carry before it is refused: one layer is normal (%3A in a fine-tuned
// model id); a path that still decodes after this many is an attack.
const maxDecodeRounds = 3

// canonicalPath returns the one form of the request path that routing,
// allow-lists and policy look at: the raw path percent-decoded once, as the
// upstream will read it. It refuses, with a *pipeline.Error:
//
//   - dot segments ("." or ".."), raw or percent-encoded at any depth up to
//     maxDecodeRounds (400): they would let a pass-through path climb out
//     of the provider's base path;
//   - paths that are only a variant of another path (404): an encoded slash
//     or backslash, ';' parameters, empty segments, a trailing slash,
//     anything but printable ASCII (printableASCII). fasthttp's own
//     normalisation maps some of these to a route and forwards others as
//     written; here each path has exactly one spelling, so a variant of
//     the chat route can never reach the upstream's chat endpoint around
//     the gateway's pipeline.
//
// raw is the path as the client sent it, without the query.
func canonicalPath(raw string) (string, error) {
	if raw == "" || raw[0] != '/' {
		return "", unknownURL(raw)
	}
	p, canonical := raw, ""
	for round := 0; ; round++ {
		if hasDotSegment(p) {
			return "", badPath()
		}
		if !strings.Contains(p, "%") {
			break
		}
		if round == maxDecodeRounds {
			return "", badPath()
		}
		d, err := url.PathUnescape(p)
		if err != nil {
			return "", pipeline.Invalid(http.StatusBadRequest, pipeline.CodeInvalidPath, "The request path has a malformed percent-encoding.")
		}
		if round == 0 {
			canonical = d
		}
		if d == p {
			break
		}
		p = d
	}
	if canonical == "" {
		canonical = raw
	}
	if strings.Count(canonical, "/") != strings.Count(raw, "/") || // an encoded slash
		strings.ContainsAny(canonical, ";\\") ||
		strings.Contains(canonical, "//") ||
		(len(canonical) > 1 && canonical[len(canonical)-1] == '/') ||
		!printableASCII(canonical) {
		return "", unknownURL(raw)
	}
	return canonical, nil
}

// modelIDPath returns the path of GET /v1/models/{id} for an id sent as
// one segment with its slashes encoded, as the SDKs send
// `meta-llama/Llama-3.1-8B` (canonicalPath refuses an encoded slash
// elsewhere). The gateway answers that route from its config, so the
// decoded slash reaches no upstream path; any other method on it is
// refused as canonicalPath refused it.
func modelIDPath(raw string) (string, bool) {
	rest, ok := strings.CutPrefix(raw, modelsRoute+"/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return "", false
	}
	id, err := url.PathUnescape(rest)
	if err != nil || !printableASCII(id) || hasDotSegment(id) {
		return "", false
	}
	return modelsRoute + "/" + id, true
}

// hasDotSegment reports whether p has a "." or ".." segment.
func hasDotSegment(p string) bool {
	for p != "" {
		seg := p
		if i := strings.IndexByte(p, '/'); i >= 0 {
			seg, p = p[:i], p[i+1:]
		} else {
			p = ""
		}
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// printableASCII reports whether s has only printable ASCII other than
// '%': no control character, space, '%' left by a second layer of
// encoding, or any byte of a non-ASCII character. No route or upstream id
// has any of them, and an upstream that trims or normalises them
// (`/v1/chat/completions%20`, a fullwidth or a zero-width character, an
// overlong encoding) would read its own chat route where the gateway saw
// another path.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f || s[i] == '%' {
			return false
		}
	}
	return true
}

func badPath() error {
	return pipeline.Invalid(http.StatusBadRequest, pipeline.CodeInvalidPath, "The request path may not contain '.' or '..' segments, encoded or not.")
}

func unknownURL(path string) error {
	return pipeline.NotFound(pipeline.CodeUnknownURL, "Unknown request URL: %s", truncate(path, 200))
}
