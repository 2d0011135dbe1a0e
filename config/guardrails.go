package config

import (
	"fmt"
	"regexp"
	"slices"
	"time"
)

const defaultGuardrailTimeout = 2 * time.Second

// Guardrail is one [[guardrails]] check on text at one stage of a request.
// Which tenants it applies to is decided by [[policies]] guardrails.
type Guardrail struct {
	Name   string `toml:"name"`
	Stage  string `toml:"stage"`  // request | response | tool_input | tool_output
	Kind   string `toml:"kind"`   // regex | pii | max_length | http
	Action string `toml:"action"` // block | redact | flag
	// Patterns are the regex kind's regular expressions (Go RE2 syntax).
	Patterns []string `toml:"patterns"`
	// PII lists the pii kind's detectors: email, phone, credit_card, iban,
	// api_key; default all.
	PII []string `toml:"pii"`
	// MaxLength is the max_length kind's limit in characters (runes).
	MaxLength int `toml:"max_length"`
	// Replacement is what redact writes instead of a match; default
	// "[REDACTED]".
	Replacement string `toml:"replacement"`
	// Window is how many bytes of a streamed answer are held back so that
	// a match split across chunks is still caught; default 128.
	Window int `toml:"window"`
	// URL, Headers, Timeout and Fail configure the http kind: the text is
	// POSTed to URL as {"text","stage","guardrail"}; the answer
	// {"flagged": bool} decides. Fail is what a timeout or error means:
	// open (pass) or closed (flagged). Default timeout 2s, fail closed.
	URL     string            `toml:"url"`
	Headers map[string]string `toml:"headers"`
	Timeout Duration          `toml:"timeout"`
	Fail    string            `toml:"fail"`
	// Tools are globs of the server tools a tool stage checks; default all.
	Tools []string `toml:"tools"`
}

// PIIKinds are the detectors of the pii kind.
var PIIKinds = []string{"email", "phone", "credit_card", "iban", "api_key"}

// setGuardrailDefaults also places the guardrails middleware in the
// request layer right after policy (whose tenant it needs) when guardrails
// exist and [middleware] request does not place it.
func (c *Config) setGuardrailDefaults() {
	if len(c.Guardrails) > 0 && !slices.Contains(c.Middleware.Request, "guardrails") {
		at := slices.Index(c.Middleware.Request, "policy") + 1
		c.Middleware.Request = slices.Insert(slices.Clone(c.Middleware.Request), at, "guardrails")
		c.Middleware.placedGuardrails = at + 1
	}
	for i := range c.Guardrails {
		g := &c.Guardrails[i]
		setStr(&g.Replacement, "[REDACTED]")
		setStr(&g.Fail, "closed")
		setInt(&g.Window, 128)
		setDur(&g.Timeout, defaultGuardrailTimeout)
		if g.Kind == "pii" && len(g.PII) == 0 {
			g.PII = PIIKinds
		}
	}
}

func (c *Config) validateGuardrails(p *problems) {
	names := map[string]bool{}
	for i, g := range c.Guardrails {
		at := fmt.Sprintf("guardrails[%d]", i)
		p.checkName(at+".name", g.Name, names)
		p.checkEnum(at+".stage", g.Stage, "request", "response", "tool_input", "tool_output")
		p.checkEnum(at+".kind", g.Kind, "regex", "pii", "max_length", "http")
		p.checkEnum(at+".action", g.Action, "block", "redact", "flag")
		p.checkPositive(at+".window", int64(g.Window))
		p.checkPositive(at+".timeout", int64(g.Timeout))
		p.checkPatterns(at+".tools", g.Tools)
		if len(g.Tools) > 0 && g.Stage != "tool_input" && g.Stage != "tool_output" {
			p.add(at+".tools", "only for the tool_input and tool_output stages")
		}
		switch g.Kind {
		case "regex":
			if len(g.Patterns) == 0 {
				p.add(at+".patterns", "required for kind regex")
			}
			for j, pat := range g.Patterns {
				if _, err := regexp.Compile(pat); err != nil {
					p.add(fmt.Sprintf("%s.patterns[%d]", at, j), "%v", err)
				}
			}
		case "pii":
			for j, k := range g.PII {
				p.checkEnum(fmt.Sprintf("%s.pii[%d]", at, j), k, PIIKinds...)
			}
		case "max_length":
			if g.MaxLength <= 0 {
				p.add(at+".max_length", "required for kind max_length, and positive")
			}
		case "http":
			p.checkHTTPURL(at+".url", g.URL)
			p.checkEnum(at+".fail", g.Fail, "open", "closed")
			if g.Action == "redact" {
				p.add(at+".action", "redact is not available for kind http (block or flag)")
			}
		}
	}
	for i, pol := range c.Policies {
		for j, n := range pol.Guardrails {
			if !names[n] {
				p.add(fmt.Sprintf("policies[%d].guardrails[%d]", i, j), "unknown guardrail %q", n)
			}
		}
	}
}
