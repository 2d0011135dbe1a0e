package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

// TestDefaults: an empty file's config (every section zero, then the
// defaults step) has the documented default of every field, section by
// section. The values are the README's configuration table.
func TestDefaults(t *testing.T) {
	t.Parallel()
	c := Defaults()
	withParts := Config{
		Providers:  []Provider{{Name: "p", Kind: "openai"}},
		Models:     []Model{{Name: "m", Provider: "p"}},
		Tools:      []Tool{{Name: "calculator", Kind: "builtin"}},
		MCPServers: []MCPServer{{Name: "s", Command: "srv"}},
		Policies:   []Policy{{Tenant: "*"}},
		Budgets:    []Budget{{Tenant: "t", Amount: 1}},
		Redis:      &Redis{Addr: "h:1"},
	}
	withParts.ApplyDefaults()
	p, m := withParts.Providers[0], withParts.Models[0]
	l, f, ch, ce := c.ToolLoop, c.Middleware.Fallback, c.Middleware.Cache, c.Middleware.ContextEdit
	sec := func(d time.Duration) Duration { return Duration(d) }
	tests := []struct {
		name      string
		got, want any
	}{
		{"server.listen", c.Server.Listen, "127.0.0.1:8080"},
		{"server.max_body_bytes", c.Server.MaxBodyBytes, 8 << 20},
		{"server.read_timeout", c.Server.ReadTimeout, sec(30 * time.Second)},
		{"server.write_timeout", c.Server.WriteTimeout, sec(60 * time.Second)},
		{"server.idle_timeout", c.Server.IdleTimeout, sec(120 * time.Second)},
		{"server.shutdown_timeout", c.Server.ShutdownTimeout, sec(30 * time.Second)},
		{"server.log_level", c.Server.LogLevel, "info"},
		{"server.log_format", c.Server.LogFormat, "json"},
		{"server.read_buffer", c.Server.ReadBuffer, 4 << 10},
		{"server.write_buffer", c.Server.WriteBuffer, 4 << 10},
		{"server.gc_min_growth_bytes", *c.Server.GCMinGrowthBytes, int64(32 << 20)},
		{"server.default_provider", withParts.Server.DefaultProvider, "p"},

		{"providers.connect_timeout", p.ConnectTimeout, sec(10 * time.Second)},
		{"providers.first_byte_timeout", p.FirstByteTimeout, sec(60 * time.Second)},
		{"providers.stream_idle_timeout", p.StreamIdleTimeout, sec(60 * time.Second)},
		{"providers.total_timeout", p.TotalTimeout, sec(10 * time.Minute)},
		{"providers.retry_after_cap", p.RetryAfterCap, sec(10 * time.Second)},
		{"providers.retries", *p.Retries, 2},
		{"providers.max_conns", p.MaxConns, 1024},
		{"providers.max_response_bytes", p.MaxResponseBytes, 32 << 20},
		{"providers.read_buffer", p.ReadBuffer, 4 << 10},
		{"providers.prompt_cache", p.PromptCache, "none"},

		{"models.upstream", m.Upstream, "m"},
		{"models.encoding", m.Encoding, "o200k_base"},
		{"models.owned_by", m.OwnedBy, "gateway"},
		{"models.deployments", m.Deployments, []Deployment{{Provider: "p", Upstream: "m", Weight: 1}}},
		{"models.middleware", m.Middleware, DefaultModelMiddleware},

		{"tool_loop.max_iterations", l.MaxIterations, 10},
		{"tool_loop.max_consecutive_errors", l.MaxConsecutiveErrors, 3},
		{"tool_loop.parallel", *l.Parallel, true},
		{"tool_loop.tool_timeout", l.ToolTimeout, sec(30 * time.Second)},
		{"tool_loop.wall_time", l.WallTime, sec(5 * time.Minute)},
		{"tool_loop.max_result_bytes", l.MaxResultBytes, 64 << 10},
		{"tool_loop.keepalive_interval", l.KeepAliveInterval, sec(5 * time.Second)},
		{"tool_loop.state_ttl", l.StateTTL, sec(time.Hour)},
		{"tool_loop.state_max_entries", l.StateMaxEntries, 10000},
		{"tool_loop.state_max_bytes", l.StateMaxBytes, 64 << 20},
		{"tool_loop.max_tool_calls", l.MaxToolCalls, DefaultMaxToolCalls},
		{"tool_loop.max_model_calls", l.MaxModelCalls, DefaultMaxModelCalls},
		{"tools.timeout", withParts.Tools[0].Timeout, sec(30 * time.Second)},
		{"tools.builtin", withParts.Tools[0].Builtin, "calculator"},
		{"mcp_servers.timeout", withParts.MCPServers[0].Timeout, sec(30 * time.Second)},

		{"middleware.request", c.Middleware.Request, DefaultRequestMiddleware},
		{"middleware.limits.fail", c.Middleware.Limits.Fail, "open"},
		{"middleware.fallback.base_backoff", f.BaseBackoff, sec(200 * time.Millisecond)},
		{"middleware.fallback.max_backoff", f.MaxBackoff, sec(5 * time.Second)},
		{"middleware.fallback.deadline", f.Deadline, sec(2 * time.Minute)},
		// With providers, the longest total_timeout: a slow JSON answer is
		// cut by its attempt's timeout, not by a shorter deadline.
		{"middleware.fallback.deadline with providers", withParts.Middleware.Fallback.Deadline, sec(10 * time.Minute)},
		{"middleware.fallback.breaker_failures", f.BreakerFailures, 5},
		{"middleware.fallback.breaker_cooldown", f.BreakerCooldown, sec(30 * time.Second)},
		{"middleware.cache.store", ch.Store, "memory"},
		{"middleware.cache.max_bytes", ch.MaxBytes, int64(64 << 20)},
		{"middleware.cache.ttl", ch.TTL, sec(10 * time.Minute)},
		{"middleware.context_edit.trigger", ce.Trigger, 0.8},
		{"middleware.context_edit.keep", ce.Keep, 3},
		{"middleware.context_edit.placeholder", ce.Placeholder, "[tool result cleared]"},
		{"middleware.context_edit.last_resort", ce.LastResort, "error"},
		{"middleware.context_edit.summary_fallback", ce.SummaryFallback, "error"},
		{"middleware.context_edit.summary_prompt", ce.SummaryPrompt, DefaultSummaryPrompt},

		{"policies.max_tokens_mode", withParts.Policies[0].MaxTokensMode, "clamp"},
		{"budgets.period", withParts.Budgets[0].Period, "month"},
		{"budgets.warn_at", withParts.Budgets[0].WarnAt, 0.8},
		{"tracing.protocol", c.Tracing.Protocol, "http/protobuf"},
		{"tracing.service_name", c.Tracing.ServiceName, "llmgw"},
		{"redis.timeout", withParts.Redis.Timeout, sec(200 * time.Millisecond)},
		{"redis.prefix", withParts.Redis.Prefix, "gw:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !reflect.DeepEqual(tt.got, tt.want) {
				t.Fatalf("%s = %#v, want %#v", tt.name, tt.got, tt.want)
			}
		})
	}
}

// TestApplyDefaultsKeepsSetFields: a section a test (or a file) sets in part
// keeps what is set and gets the defaults for the rest, so tests build
// configs by setting what they care about.
// A pass-through call that names no model goes to the first provider that
// is an HTTP API, not to an in-process mock listed before it (the shipped
// config lists the demo model first); with mocks alone, the first.
func TestDefaultProviderIsNoMock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kinds []string
		want  string
	}{
		{[]string{"mock", "openai", "anthropic"}, "p1"},
		{[]string{"anthropic", "openai"}, "p0"},
		{[]string{"mock", "mock"}, "p0"},
	} {
		var c Config
		for i, k := range tc.kinds {
			c.Providers = append(c.Providers, Provider{Name: "p" + string(rune('0'+i)), Kind: k, APIKey: "k"})
		}
		c.ApplyDefaults()
		if c.Server.DefaultProvider != tc.want {
			t.Errorf("%v: %q, want %q", tc.kinds, c.Server.DefaultProvider, tc.want)
		}
	}
}

func TestApplyDefaultsKeepsSetFields(t *testing.T) {
	t.Parallel()
	c := Config{ToolLoop: ToolLoop{MaxIterations: 3, ToolTimeout: Duration(time.Second)}, Tools: []Tool{{Name: "t", Kind: "http"}}}
	c.ApplyDefaults()
	def := Defaults().ToolLoop
	if c.ToolLoop.MaxIterations != 3 || c.ToolLoop.WallTime != def.WallTime || c.Tools[0].Timeout != Duration(time.Second) {
		t.Fatalf("tool_loop %+v, tools[0].timeout %v", c.ToolLoop, c.Tools[0].Timeout)
	}
}

// TestConstructorsCarryNoDefaults: the constructors that take a config
// section use it as given; none fills an unset field with a literal of its
// own (a second copy of a default that drifts from config's). Each row names
// one constructor; the check finds `if x <= 0 { x = <literal> }` and its
// == 0, == "" and == nil forms.
func TestConstructorsCarryNoDefaults(t *testing.T) {
	t.Parallel()
	constructors := []struct {
		file, fn string
		allow    string // a variable whose default is the package's own, not configuration
	}{
		{"toolloop/loop.go", "New", ""},
		// A tool without parameters takes any object: part of what a tool is.
		{"toolloop/registry.go", "newTool", "params"},
		{"toolloop/state_memory.go", "NewMemoryState", ""},
		{"toolloop/state_redis.go", "NewRedisState", ""},
		{"fallback/fallback.go", "New", ""},
		{"fallback/state.go", "route", ""},
		{"contextedit/middleware.go", "New", ""},
		{"contextedit/middleware.go", "newSettings", ""},
		{"caching/response.go", "NewResponseCache", ""},
		{"caching/store.go", "NewMemoryStore", ""},
		{"caching/redis.go", "NewRedisStore", ""},
		{"mcpclient/server.go", "newServer", ""},
	}
	for _, c := range constructors {
		t.Run(c.file+":"+c.fn, func(t *testing.T) {
			t.Parallel()
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, filepath.Join("..", c.file), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			fn := findFunc(f, c.fn)
			if fn == nil {
				t.Fatalf("no func %s in %s", c.fn, c.file)
			}
			for _, pos := range literalDefaults(fn, c.allow) {
				t.Errorf("%s: fills an unset field with its own default; config.ApplyDefaults is the one place", fset.Position(pos))
			}
		})
	}
}

// TestLiteralDefaultsFinds: the check of TestConstructorsCarryNoDefaults
// finds the forms it looks for, and passes test hooks such as a nil clock.
func TestLiteralDefaultsFinds(t *testing.T) {
	t.Parallel()
	const src = `package p
func A(o O) {
	if o.TTL <= 0 { o.TTL = 10 * time.Minute }
	if o.Name == "" { o.Name = "x" }
	if o.Max == 0 { o.Max = config.DefaultMax }
	if o.Now == nil { o.Now = time.Now }
	if o.N <= 0 { return }
}`
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(literalDefaults(findFunc(f, "A"), "")); got != 3 {
		t.Fatalf("found %d literal defaults, want 3", got)
	}
}

func findFunc(f *ast.File, name string) *ast.FuncDecl {
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name {
			return fn
		}
	}
	return nil
}

// literalDefaults returns the positions of the if statements in fn that test
// a value for zero (<= 0, == 0, == "", == nil) and assign a literal, a time
// unit or a config constant in their body to anything but allow.
func literalDefaults(fn *ast.FuncDecl, allow string) []token.Pos {
	var found []token.Pos
	ast.Inspect(fn, func(n ast.Node) bool {
		is, ok := n.(*ast.IfStmt)
		if !ok || !testsZero(is.Cond) {
			return true
		}
		for _, st := range is.Body.List {
			as, ok := st.(*ast.AssignStmt)
			if ok && len(as.Rhs) == 1 && isDefaultValue(as.Rhs[0]) && !isIdent(as.Lhs[0], allow) {
				found = append(found, is.Pos())
				break
			}
		}
		return true
	})
	return found
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

func testsZero(e ast.Expr) bool {
	b, ok := e.(*ast.BinaryExpr)
	if !ok || (b.Op != token.EQL && b.Op != token.LEQ) {
		return false
	}
	switch y := b.Y.(type) {
	case *ast.BasicLit:
		return y.Value == "0" || y.Value == `""`
	case *ast.Ident:
		return y.Name == "nil"
	}
	return false
}

// isDefaultValue reports a literal, an expression with one, a time unit or
// a config constant.
func isDefaultValue(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			found = true
		case *ast.CompositeLit:
			found = true
		case *ast.SelectorExpr:
			if pkg, ok := n.X.(*ast.Ident); ok {
				unit := n.Sel.Name == "Hour" || n.Sel.Name == "Minute" || n.Sel.Name == "Second" || n.Sel.Name == "Millisecond"
				found = found || (pkg.Name == "time" && unit) || pkg.Name == "config"
			}
		}
		return !found
	})
	return found
}
