package openapi

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/observe"
)

// Source is every [[openapi]] spec's operations as a tool source of the
// tool loop. Its tools never change while it lives (a reload builds a new
// one). Safe for concurrent use.
type Source struct {
	tools []config.Tool
	ops   map[string]*Operation
}

// Load reads and parses cfg's specs; nil when there are none. An error
// names the spec and what is wrong with it.
func Load(ctx context.Context, cfg *config.Config) (*Source, error) {
	if len(cfg.OpenAPI) == 0 {
		return nil, nil
	}
	dir := ""
	if cfg.Path != "" {
		dir = filepath.Dir(cfg.Path)
	}
	s := &Source{ops: map[string]*Operation{}}
	for i, sc := range cfg.OpenAPI {
		at := fmt.Sprintf("openapi[%d] %q (%s)", i, sc.Name, sc.Spec)
		doc, err := readSpec(ctx, sc.Spec, dir)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		ops, err := Parse(doc, sc, newClient())
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		if sc.BaseURL == "" {
			// The spec's server URL stands in for base_url: its
			// credentials (key=, user info) are masked as base_url's are,
			// by the rule config applies to it.
			def := config.Config{OpenAPI: []config.OpenAPI{{BaseURL: ops[0].base.String()}}}
			observe.Secrets.Add(def.Secrets()...)
		}
		for _, o := range ops {
			if _, dup := s.ops[o.Tool.Name]; dup {
				return nil, fmt.Errorf("%s: the tool name %q is taken by another spec's operation (set prefix)", at, o.Tool.Name)
			}
			s.ops[o.Tool.Name] = o
			s.tools = append(s.tools, o.Tool)
		}
	}
	return s, nil
}

// newClient follows redirects only within the host it asked, five at
// most: past them, as for another host, the redirect itself is the
// answer (an error result naming its status), not a failure to reach the
// server.
func newClient() *http.Client {
	return &http.Client{CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return http.ErrUseLastResponse
		}
		if req.URL.Host != via[0].URL.Host || req.URL.Scheme != via[0].URL.Scheme {
			return http.ErrUseLastResponse
		}
		return nil
	}}
}

// Version is constant: the operations never change.
func (s *Source) Version() uint64 { return 1 }

// Tools returns the operations' tool definitions (shared, read-only).
func (s *Source) Tools() []config.Tool { return s.tools }

// Call runs the operation behind the tool name.
func (s *Source) Call(ctx context.Context, name string, args []byte) ([]byte, bool, error) {
	o := s.ops[name]
	if o == nil {
		return []byte("unknown operation " + name), true, nil
	}
	return o.Call(ctx, args)
}
