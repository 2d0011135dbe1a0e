// Package config is the schema of config.toml: decoding (strict: an unknown
// key is an error naming its line), defaults, ${ENV} expansion for secrets,
// and validation with the key's position in every message.
//
// The lifecycle is Load → (decode, expand, defaults, validate); the result is
// read-only and shared by every request built from it.
package config

import (
	"time"
	"unicode/utf8"
)

// Config is the whole file.
type Config struct {
	Server     Server      `toml:"server"`
	Providers  []Provider  `toml:"providers"`
	Models     []Model     `toml:"models"`
	Tools      []Tool      `toml:"tools"`
	MCPServers []MCPServer `toml:"mcp_servers"`
	ToolLoop   ToolLoop    `toml:"tool_loop"`
	Middleware Middleware  `toml:"middleware"`
	// urlSecrets are the values ${NAME} put in URL fields (expandURL).
	urlSecrets []string
	// Dropped names the optional providers left out for want of a key
	// (with the models only they serve), for the build to log.
	Dropped []string `toml:"-"`
	// droppedModels maps each model left out with them to its provider,
	// for validate to say why a setting that names one is refused.
	droppedModels map[string]string
	// envValues is every value ${NAME} put anywhere (expand): a
	// validation error masks the secrets among them (maskEnv).
	envValues []envValue
	// badRefs are the malformed ${...} references of the expanded fields
	// (expandStr), for Parse to refuse.
	badRefs []badRef
	// approvalUnset: tool_loop.approval_secret was written but expanded
	// to nothing (an unset ${NAME}).
	approvalUnset bool
	// emptied are the Redis passwords written but expanded to nothing.
	emptied    []string
	Keys       []Key       `toml:"keys"`
	Policies   []Policy    `toml:"policies"`
	Redis      *Redis      `toml:"redis"`
	Tracing    Tracing     `toml:"tracing"`
	Limits     []Limit     `toml:"limits"`
	Budgets    []Budget    `toml:"budgets"`
	Responses  Responses   `toml:"responses"`
	Guardrails []Guardrail `toml:"guardrails"`
	OpenAPI    []OpenAPI   `toml:"openapi"`

	// Path is the file this config was read from.
	Path string `toml:"-"`
}

// Server holds the listener and process settings.
type Server struct {
	Listen       string   `toml:"listen"`         // default "127.0.0.1:8080"
	MaxBodyBytes int      `toml:"max_body_bytes"` // default 8 MiB
	ReadTimeout  Duration `toml:"read_timeout"`   // reading a request; default 30s
	// WriteTimeout bounds each write of a streamed answer to a client, and
	// the whole write of a chat answer over 64 KiB: a client that stops
	// reading (but keeps its connection) ends its request as one that
	// left, or loses its connection, once a write has waited this long.
	// Default 60s.
	WriteTimeout    Duration `toml:"write_timeout"`
	IdleTimeout     Duration `toml:"idle_timeout"`     // keep-alive; default 120s
	ShutdownTimeout Duration `toml:"shutdown_timeout"` // in-flight grace; default 30s
	// ShutdownDelay is how long a SIGTERM'd gateway goes on serving, with
	// /readyz answering 503 and every answer closing its connection, before
	// it stops accepting: time for a load balancer to take it out of
	// rotation, so that requests sent meanwhile are still answered.
	// Default 0 (stop accepting at once).
	ShutdownDelay   Duration `toml:"shutdown_delay"`
	LogLevel        string   `toml:"log_level"`        // debug|info|warn|error; default info
	LogFormat       string   `toml:"log_format"`       // json|console; default json
	DefaultProvider string   `toml:"default_provider"` // for /v1/* pass-through without a model; default: first provider not of kind mock
	// PassthroughUnknownModels lets a pass-through body name a model that is
	// not configured (it goes to default_provider, still subject to the
	// tenant's model allow-list). Default false: such a body gets 404.
	PassthroughUnknownModels bool   `toml:"passthrough_unknown_models"`
	MetricsListen            string `toml:"metrics_listen"` // separate address for /metrics, /readyz, /healthz (no key); default none
	AdminKey                 string `toml:"admin_key"`      // bearer key for /metrics and /readyz details on the main listener; may be ${ENV}
	// ReadBuffer and WriteBuffer are the bytes of each client connection's
	// read and write buffers (the read buffer also bounds the request
	// headers); default 4 KiB each. Set at start: a reload keeps them.
	ReadBuffer  int `toml:"read_buffer"`
	WriteBuffer int `toml:"write_buffer"`
	// GCMinGrowthBytes is the least the heap grows between two garbage
	// collections (internal/gcfloor): on a small live heap the collector
	// otherwise runs several times a second at a few thousand requests per
	// second. 0 leaves Go's pacing; the GOGC environment variable, when
	// set, wins. Default 32 MiB; a reload applies it from the next
	// collection.
	GCMinGrowthBytes *int64 `toml:"gc_min_growth_bytes"`
}

// Provider is an upstream API.
type Provider struct {
	Name              string            `toml:"name"`
	Kind              string            `toml:"kind"`                // openai|anthropic|mock
	BaseURL           string            `toml:"base_url"`            // e.g. https://api.openai.com/v1; anthropic default https://api.anthropic.com
	APIKey            string            `toml:"api_key"`             // may be ${ENV}
	Headers           map[string]string `toml:"headers"`             // values may be ${ENV}
	Optional          bool              `toml:"optional"`            // drop this provider (and its models) when api_key expands empty
	ConnectTimeout    Duration          `toml:"connect_timeout"`     // default 10s
	FirstByteTimeout  Duration          `toml:"first_byte_timeout"`  // default 60s
	StreamIdleTimeout Duration          `toml:"stream_idle_timeout"` // default 60s
	TotalTimeout      Duration          `toml:"total_timeout"`       // default 10m
	MaxConns          int               `toml:"max_conns"`           // default 1024
	MaxResponseBytes  int               `toml:"max_response_bytes"`  // non-streamed response body limit; default 32 MiB
	ReadBuffer        int               `toml:"read_buffer"`         // bytes of each upstream connection's read buffer (bounds the response headers); default 4 KiB
	Retries           *int              `toml:"retries"`             // default 2
	RetryAfterCap     Duration          `toml:"retry_after_cap"`     // default 10s
	PromptCache       string            `toml:"prompt_cache"`        // none|openai|anthropic; default none (anthropic for kind anthropic)
	PromptCacheTTL    string            `toml:"prompt_cache_ttl"`    // anthropic marker ttl ("5m"|"1h"); default unset
	Responses         string            `toml:"responses"`           // translate|native: how /v1/responses reaches this provider; default translate
	Mock              *Mock             `toml:"mock"`                // kind = "mock" only
	AnthropicVersion  string            `toml:"anthropic_version"`   // kind = "anthropic": the anthropic-version header; default 2023-06-01
	AnthropicBeta     []string          `toml:"anthropic_beta"`      // kind = "anthropic": anthropic-beta features, sent comma-joined
}

// Mock configures an in-process mockllm provider.
type Mock struct {
	FirstByteDelay Duration `toml:"first_byte_delay"`
	ChunkDelay     Duration `toml:"chunk_delay"`
	ChunkSize      int      `toml:"chunk_size"` // characters of text per chunk; default 8
}

// Model maps a client-facing model name to deployments.
type Model struct {
	Name          string       `toml:"name"`
	Provider      string       `toml:"provider"`       // shorthand for one deployment
	Upstream      string       `toml:"upstream"`       // upstream model name; default Name
	Deployments   []Deployment `toml:"deployments"`    // several deployments with weights
	ContextWindow int          `toml:"context_window"` // tokens
	Encoding      string       `toml:"encoding"`       // tokenizer; default o200k_base
	Fallbacks     []string     `toml:"fallbacks"`      // other model names, in order
	Middleware    []string     `toml:"middleware"`     // model-call layer, outermost first; default [fallback, context_edit, prompt_cache]
	OwnedBy       string       `toml:"owned_by"`
	MaxTokens     int          `toml:"max_tokens"` // sent to providers that require one (anthropic) when the client sets none; default 4096
	Price         *Price       `toml:"price"`      // dollars per million tokens; default from DefaultPrices by upstream name, else free
	// ToolSelect overrides [middleware.tool_select] for requests to this
	// model, key by key (see Config.ToolSelectFor).
	ToolSelect *ToolSelect `toml:"tool_select"`
	// ToolCalling is "prompted" for a model without native function
	// calling: tools go into a system prompt and calls are parsed from its
	// text (toolprompt). Default "native".
	ToolCalling    string `toml:"tool_calling"`
	PromptedFormat string `toml:"prompted_format"` // fenced|json_schema; default fenced
	ToolPrompt     string `toml:"tool_prompt"`     // replaces the format's system prompt; holds {tools}
}

// Price is what a model costs, in dollars per million tokens.
type Price struct {
	Input       float64 `toml:"input"`
	Output      float64 `toml:"output"`
	CachedInput float64 `toml:"cached_input"` // default Input
}

// Deployment is one provider serving a model.
type Deployment struct {
	Provider string `toml:"provider"`
	Upstream string `toml:"upstream"`
	Weight   int    `toml:"weight"` // default 1
}

// MaxToolDescription is the longest function description OpenAI accepts
// (1024 characters: a longer one fails the whole request, 400
// string_above_max_length).
const MaxToolDescription = 1024

// ClipDescription bounds a tool description a server wrote (an MCP tool's,
// an OpenAPI operation's) to MaxToolDescription bytes, cut at a character's
// start: a longer one would fail every request that offers the tool.
func ClipDescription(s string) string {
	if len(s) <= MaxToolDescription {
		return s
	}
	n := MaxToolDescription
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// Tool is a server-side tool.
type Tool struct {
	Name        string            `toml:"name"`
	Description string            `toml:"description"`
	Parameters  string            `toml:"parameters"`  // JSON Schema, as a JSON string
	Kind        string            `toml:"kind"`        // builtin|http|agent|mcp
	Server      string            `toml:"-"`           // kind=mcp: the [[mcp_servers]] name (set by the MCP client)
	Builtin     string            `toml:"builtin"`     // kind=builtin: which one; default Name
	URL         string            `toml:"url"`         // kind=http
	Headers     map[string]string `toml:"headers"`     // kind=http; values may be ${ENV}
	Model       string            `toml:"model"`       // kind=agent
	System      string            `toml:"system"`      // kind=agent: its system prompt; builtin write_todos: the system prompt addition
	Timeout     Duration          `toml:"timeout"`     // default tool_loop.tool_timeout
	Concurrency int               `toml:"concurrency"` // concurrent calls; 0 = unlimited
	Idempotent  bool              `toml:"idempotent"`  // retried on failure; results cacheable
	CacheTTL    Duration          `toml:"cache_ttl"`   // idempotent result cache; 0 = off
	Models      []string          `toml:"models"`      // glob patterns of models that get it; default all
	MaxCalls    int               `toml:"max_calls"`   // calls per client request; 0 = unlimited
	// Approval is "always" when a person must approve each call before it
	// runs (the loop pauses and hands the call to the client); "" or
	// "never" = runs as soon as the model calls it.
	Approval string `toml:"approval"`
	// Repeatable is set by the gateway, never by config, for a tool whose
	// own definition says it only reads or that calling it again has no
	// further effect (an MCP server's readOnlyHint or idempotentHint): an
	// answer it took part in may be served again, as one of an
	// Idempotent tool may.
	Repeatable bool `toml:"-"`
}

// MCPServer is an MCP tool server whose tools become server tools.
type MCPServer struct {
	Name    string            `toml:"name"`
	Command string            `toml:"command"` // stdio
	Args    []string          `toml:"args"`
	Env     map[string]string `toml:"env"`
	URL     string            `toml:"url"` // streamable HTTP
	Headers map[string]string `toml:"headers"`
	Prefix  string            `toml:"prefix"`
	Allow   []string          `toml:"allow"`
	Deny    []string          `toml:"deny"`
	Timeout Duration          `toml:"timeout"`
	Models  []string          `toml:"models"`
	// MaxCalls bounds the calls per client request of each of the server's
	// tools, like tools.max_calls; 0 = unlimited.
	MaxCalls int `toml:"max_calls"`
	// Approval lists globs of the server's own tool names (before prefix,
	// like allow and deny) whose calls a person must approve.
	Approval []string `toml:"approval"`
}

// ToolLoop holds the loop's budgets (docs/architecture.md §3).
type ToolLoop struct {
	MaxIterations           int      `toml:"max_iterations"`         // default 10
	MaxConsecutiveErrors    int      `toml:"max_consecutive_errors"` // default 3
	Parallel                *bool    `toml:"parallel"`               // default true
	ToolTimeout             Duration `toml:"tool_timeout"`           // default 30s
	WallTime                Duration `toml:"wall_time"`              // default 5m
	IncludeDetailedErrors   bool     `toml:"include_detailed_errors"`
	TerminateOnUnknownCalls bool     `toml:"terminate_on_unknown_calls"`
	MaxResultBytes          int      `toml:"max_result_bytes"`   // default 64 KiB
	KeepAliveInterval       Duration `toml:"keepalive_interval"` // default 5s
	StateTTL                Duration `toml:"state_ttl"`          // mixed-turn state; default 1h
	StateMaxEntries         int      `toml:"state_max_entries"`  // default 10000
	StateMaxBytes           int      `toml:"state_max_bytes"`    // memory state bound; default 64 MiB
	// MaxToolCalls bounds the server tool calls of one client request; a
	// call past it is answered with an error result and not run.
	MaxToolCalls int `toml:"max_tool_calls"` // default 50
	// MaxModelCalls bounds the model calls one client request causes: the
	// loop's rounds and every call a tool makes (agent tools). At least 2.
	MaxModelCalls int `toml:"max_model_calls"` // default 25
	// ApprovalSecret keys the tag in the ids of calls awaiting approval, so
	// that every replica recognises its own ids after their state expired;
	// may be ${ENV}. Empty = a random key per process (ids from another
	// replica or before a reload are then refused rather than "expired").
	ApprovalSecret string `toml:"approval_secret"`
}

// Middleware holds the settings of each middleware.
type Middleware struct {
	Request     []string    `toml:"request"` // request layer order; default [policy, limits, cache]
	Limits      LimitsMode  `toml:"limits"`
	Fallback    Fallback    `toml:"fallback"`
	Cache       Cache       `toml:"cache"`
	ContextEdit ContextEdit `toml:"context_edit"`
	ToolSelect  ToolSelect  `toml:"tool_select"`
	// placedGuardrails is 1 + the index in Request where the defaults
	// placed "guardrails" (0: the file's list is as written), so that a
	// problem names the file's index.
	placedGuardrails int
}

// Fallback configures retries, backoff and circuit breaking.
type Fallback struct {
	BaseBackoff     Duration `toml:"base_backoff"`     // default 200ms
	MaxBackoff      Duration `toml:"max_backoff"`      // default 5s
	Deadline        Duration `toml:"deadline"`         // total per request; default the longest provider total_timeout (10m), at least 2m
	BreakerFailures int      `toml:"breaker_failures"` // consecutive failures to open; default 5
	BreakerCooldown Duration `toml:"breaker_cooldown"` // default 30s
	// SharedBreakers shares circuit openings between replicas through
	// [redis] (pub/sub, no Redis call per request).
	SharedBreakers bool `toml:"shared_breakers"`
}

// Cache configures the response cache and its store.
type Cache struct {
	Enabled      bool     `toml:"enabled"`
	Store        string   `toml:"store"`      // memory|redis; default memory
	MaxBytes     int64    `toml:"max_bytes"`  // memory store bound; default 64 MiB
	TTL          Duration `toml:"ttl"`        // default 10m
	Always       bool     `toml:"always"`     // also cache when temperature is not 0
	ToolCalls    bool     `toml:"tool_calls"` // also cache client tool-call turns
	SharedAcross bool     `toml:"shared_across_tenants"`
}

// ContextEdit configures clear-tool-uses context editing.
type ContextEdit struct {
	Trigger         float64  `toml:"trigger"`        // tokens (>1) or fraction of the window (<=1); default 0.8
	Keep            int      `toml:"keep"`           // most recent tool results kept; default 3
	ClearAtLeast    int      `toml:"clear_at_least"` // tokens; default 0
	ExcludeTools    []string `toml:"exclude_tools"`
	Placeholder     string   `toml:"placeholder"` // default "[tool result cleared]"
	ClearToolInputs bool     `toml:"clear_tool_inputs"`
	LastResort      string   `toml:"last_resort"`      // error|drop_turns|summarize; default error
	SummaryModel    string   `toml:"summary_model"`    // summarize: the model that writes the summary
	SummaryPrompt   string   `toml:"summary_prompt"`   // summarize: its system prompt; default DefaultSummaryPrompt
	SummaryFallback string   `toml:"summary_fallback"` // summarize: error|drop_turns when no summary can be had; default error
}

// ToolSelect configures LLM tool selection: a request that offers more than
// MaxTools tools (client and server tools together) is first shown to the
// selector model, and only the tools it picks (plus AlwaysInclude, the tools
// the history calls and the one tool_choice names) are offered upstream.
type ToolSelect struct {
	Model         string   `toml:"model"`          // the selector, a configured model; "" = off
	MaxTools      int      `toml:"max_tools"`      // select above this many tools, and pick at most this many; default 20
	MinTools      int      `toml:"min_tools"`      // an answer with fewer valid names offers every tool; default 1
	AlwaysInclude []string `toml:"always_include"` // tool names offered whenever the request offers them
	Enabled       *bool    `toml:"enabled"`        // false turns selection off (in a model's table: for that model); default true
}

// Tool selection defaults.
const (
	DefaultSelectMaxTools = 20
	DefaultSelectMinTools = 1
)

// Tracing configures OpenTelemetry traces. Unset fields fall back to the
// standard OTEL_EXPORTER_OTLP_* environment variables.
type Tracing struct {
	Enabled        bool              `toml:"enabled"`         // default false: no spans, no cost
	Endpoint       string            `toml:"endpoint"`        // OTLP endpoint URL; default from OTEL_EXPORTER_OTLP_ENDPOINT, else the exporter's
	Protocol       string            `toml:"protocol"`        // http/protobuf | grpc; default http/protobuf
	Headers        map[string]string `toml:"headers"`         // values may be ${ENV}
	SampleRatio    *float64          `toml:"sample_ratio"`    // default 1 (parent-based)
	ServiceName    string            `toml:"service_name"`    // default llmgw (OTEL_SERVICE_NAME wins)
	CaptureContent bool              `toml:"capture_content"` // put prompts and answers on spans
}

// LimitsMode says what rate limits and budgets do when their shared store
// (Redis) cannot be reached.
type LimitsMode struct {
	Fail string `toml:"fail"` // open (allow, count locally, warn) | closed (429); default open
}

// Limit is one [[limits]] rule. A request is counted by every rule whose
// tenant, key and model globs match it. A dimension the rule leaves unset
// is shared: tenant = "*" gives every tenant its own counter, no tenant
// gives all tenants one counter together.
type Limit struct {
	Tenant             string `toml:"tenant"`
	Key                string `toml:"key"`   // the key's configured name
	Model              string `toml:"model"` // client-facing model name
	RequestsPerMinute  int64  `toml:"requests_per_minute"`
	TokensPerMinute    int64  `toml:"tokens_per_minute"`
	Concurrent         int64  `toml:"concurrent"`
	ToolCallsPerMinute int64  `toml:"tool_calls_per_minute"`
}

// Budget caps the spend of a tenant or of one key over a period.
type Budget struct {
	Tenant string  `toml:"tenant"` // one of tenant, key
	Key    string  `toml:"key"`
	Amount float64 `toml:"amount"`  // dollars
	Period string  `toml:"period"`  // day | month | total; default month
	WarnAt float64 `toml:"warn_at"` // fraction of amount after which x-gateway-budget-remaining is sent; default 0.8
}

// Key is a gateway API key naming a tenant.
type Key struct {
	Name   string `toml:"name"`
	Tenant string `toml:"tenant"`
	Role   string `toml:"role"`   // "" | admin (may read /v1/gateway/usage)
	Key    string `toml:"key"`    // the key itself, usually ${ENV}
	SHA256 string `toml:"sha256"` // or its hex SHA-256
}

// Policy holds the rules of one tenant ("*" = defaults for all).
type Policy struct {
	Tenant        string   `toml:"tenant"`
	Models        []string `toml:"models"`          // glob patterns; default all
	Tools         []string `toml:"tools"`           // server tools allowed; default all
	MaxBodyBytes  int      `toml:"max_body_bytes"`  // 0 = server default
	MaxTokens     int      `toml:"max_tokens"`      // cap on max_tokens/max_completion_tokens; 0 = none
	MaxTokensMode string   `toml:"max_tokens_mode"` // clamp|reject; default clamp
	Cache         *bool    `toml:"cache"`           // override of middleware.cache.enabled
	ToolTrace     bool     `toml:"tool_trace"`      // always add x_gateway to responses
	// Passthrough lists the /v1 paths (path.Match globs, "/v1/audio/*") this
	// tenant may use besides chat completions and models; default
	// policies.DefaultPassthrough (the stateless model endpoints).
	Passthrough []string `toml:"passthrough"`
	// ApprovalTools, when set (even to []), replaces the tools' own approval
	// settings for this tenant: exactly the server tools matching one of
	// these globs need a person's approval.
	ApprovalTools []string `toml:"approval_tools"`
	// Guardrails names the [[guardrails]] that check this tenant's
	// requests; set (even to []) in a tenant's entry, it replaces the "*"
	// entry's list.
	Guardrails []string `toml:"guardrails"`
}

// Duration is a time.Duration written as "1.5s" in TOML.
type Duration time.Duration

// envValue is what ${name} expanded to.
type envValue struct{ name, value string }

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
