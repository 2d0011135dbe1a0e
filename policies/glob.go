package policies

import (
	"fmt"
	"path"
	"strings"
)

// globs is an allow-list of path.Match patterns compiled once in New so that
// a request pays a map lookup and, only for patterns that need it, a
// path.Match call. A nil *globs allows everything (the key was not set);
// a non-nil empty one allows nothing (the key was set to []).
//
// The pattern "*" alone matches every name, including names with '/'
// ("openrouter/meta/llama"): that is what a user writing models = ["*"]
// means, although path.Match would stop at the slash. Every other pattern
// follows path.Match exactly. Read-only after compile; safe for concurrent use.
type globs struct {
	all      bool
	exact    map[string]struct{}
	prefixes []string // "gpt-4o*": the part before the final '*', no other metacharacter
	patterns []string // everything else, through path.Match
	deep     bool     // a final '*' also crosses '/' (path allow-lists: "/v1/files/*")
}

// compilePathGlobs compiles URL path patterns: like compileGlobs, except that
// a final '*' matches the rest of the path, slashes included, so
// "/v1/files/*" allows /v1/files/{id}/content.
func compilePathGlobs(pats []string) (*globs, error) {
	g, err := compileGlobs(pats)
	if g != nil {
		g.deep = true
	}
	return g, err
}

// compileGlobs compiles pats; nil pats give a nil (allow-all) matcher.
func compileGlobs(pats []string) (*globs, error) {
	if pats == nil {
		return nil, nil
	}
	g := &globs{}
	for i, p := range pats {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("[%d] %q: %w", i, p, err)
		}
		switch {
		case p == "*":
			g.all = true
		case !strings.ContainsAny(p, `*?[\`):
			if g.exact == nil {
				g.exact = make(map[string]struct{}, len(pats))
			}
			g.exact[p] = struct{}{}
		case strings.HasSuffix(p, "*") && !strings.ContainsAny(p[:len(p)-1], `*?[\`):
			g.prefixes = append(g.prefixes, p[:len(p)-1])
		default:
			g.patterns = append(g.patterns, p)
		}
	}
	return g, nil
}

// match reports whether name is allowed.
func (g *globs) match(name string) bool {
	if g == nil || g.all {
		return true
	}
	if _, ok := g.exact[name]; ok {
		return true
	}
	for _, p := range g.prefixes {
		// path.Match's '*' does not cross '/'; keep that rule on the fast path.
		if strings.HasPrefix(name, p) && (g.deep || strings.IndexByte(name[len(p):], '/') < 0) {
			return true
		}
	}
	for _, p := range g.patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}
