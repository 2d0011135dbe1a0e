package config

import (
	"fmt"
	"strings"
)

// OpenAPI is one [[openapi]] spec whose operations become server tools.
type OpenAPI struct {
	Name string `toml:"name"`
	// Spec is a file path (relative to the config file) or an http(s) URL
	// of an OpenAPI 3.0 or 3.1 document, JSON or YAML.
	Spec string `toml:"spec"`
	// BaseURL is where calls go, and the only place they go; default the
	// spec's first server when that is an absolute http(s) URL.
	BaseURL string            `toml:"base_url"`
	Headers map[string]string `toml:"headers"` // sent with every call; values may be ${ENV}
	// Operations are globs of operationIds to offer; default all.
	Operations []string `toml:"operations"`
	Prefix     string   `toml:"prefix"`  // prepended to every tool name
	Timeout    Duration `toml:"timeout"` // per call; default tool_loop.tool_timeout
	// Approval lists globs of operationIds whose calls a person must approve.
	Approval []string `toml:"approval"`
	Models   []string `toml:"models"` // globs of models that get the tools; default all
}

func (c *Config) setOpenAPIDefaults() {
	for i := range c.OpenAPI {
		setDur(&c.OpenAPI[i].Timeout, c.ToolLoop.ToolTimeout.D())
	}
}

func (c *Config) validateOpenAPI(p *problems) {
	names := map[string]bool{}
	for i, s := range c.OpenAPI {
		at := fmt.Sprintf("openapi[%d]", i)
		p.checkName(at+".name", s.Name, names)
		if s.Spec == "" {
			p.add(at+".spec", "required: a file path or an http(s) URL")
		} else if strings.HasPrefix(s.Spec, "http:") || strings.HasPrefix(s.Spec, "https:") {
			p.checkHTTPURL(at+".spec", s.Spec)
		}
		if s.BaseURL != "" {
			p.checkHTTPURL(at+".base_url", s.BaseURL)
		}
		if s.Prefix != "" && !toolName.MatchString(s.Prefix) {
			p.add(at+".prefix", "%q must match [a-zA-Z0-9_-]{1,64}", s.Prefix)
		}
		p.checkPositive(at+".timeout", int64(s.Timeout))
		p.checkPatterns(at+".operations", s.Operations)
		p.checkPatterns(at+".approval", s.Approval)
		p.checkPatterns(at+".models", s.Models)
	}
}
