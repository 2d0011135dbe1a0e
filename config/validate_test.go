package config

import (
	"strings"
	"testing"
)

// validBase is a minimal valid config; each case of TestValidate adds to it.
const validBase = `
[[providers]]
name = "p"
kind = "mock"
[[models]]
name = "m"
provider = "p"
`

// TestValidate gives every check of validate (and the limits checks it
// folds in) a case: the key it names and its message, exactly as the file
// writes the key.
func TestValidate(t *testing.T) {
	t.Parallel()
	prov := func(body string) string { return "[[providers]]\nname = \"q\"\nkind = \"mock\"\n" + body }
	model := func(body string) string { return "[[models]]\nname = \"n\"\nprovider = \"p\"\n" + body }
	tool := func(body string) string { return "[[tools]]\nname = \"t\"\nkind = \"builtin\"\n" + body }
	mcp := func(body string) string { return "[[mcp_servers]]\nname = \"s\"\ncommand = \"srv\"\n" + body }
	mcpURL := func(body string) string { return "[[mcp_servers]]\nname = \"s\"\nurl = \"http://h\"\n" + body }
	policy := func(body string) string { return "[[policies]]\ntenant = \"*\"\n" + body }
	tests := []struct {
		name string
		toml string
		want string // "key: message"; "" = valid
	}{
		{name: "valid", toml: ""},
		{name: "log level", toml: "[server]\nlog_level = \"loud\"\n", want: `server.log_level: "loud" is not one of debug, info, warn, error`},
		{name: "log format", toml: "[server]\nlog_format = \"xml\"\n", want: `server.log_format: "xml" is not one of json, console`},
		{name: "max body bytes", toml: "[server]\nmax_body_bytes = -1\n", want: `server.max_body_bytes: must be positive`},
		{name: "policy max tokens negative", toml: policy("max_tokens = -1\n"), want: `policies[0].max_tokens: must be positive`},
		{name: "policy max body negative", toml: policy("max_body_bytes = -1\n"), want: `policies[0].max_body_bytes: must be positive`},
		{name: "mock chunk size negative", toml: "[[providers]]\nname = \"m\"\nkind = \"mock\"\n[providers.mock]\nchunk_size = -6\n", want: `providers[1].mock.chunk_size: must be positive`},
		{name: "prompt cache ttl", toml: "[[providers]]\nname = \"a\"\nkind = \"anthropic\"\napi_key = \"k\"\nprompt_cache_ttl = \"banana\"\n", want: `providers[1].prompt_cache_ttl: "banana" is not one of 5m, 1h`},
		{name: "prompt cache ttl 1h", toml: "[[providers]]\nname = \"a\"\nkind = \"anthropic\"\napi_key = \"k\"\nprompt_cache_ttl = \"1h\"\n"},
		{name: "server read buffer too small", toml: "[server]\nread_buffer = 512\n", want: `server.read_buffer: 512 is outside 1024..1048576 bytes`},
		{name: "server write buffer too large", toml: "[server]\nwrite_buffer = 2097152\n", want: `server.write_buffer: 2097152 is outside 1024..1048576 bytes`},
		{name: "negative gc growth", toml: "[server]\ngc_min_growth_bytes = -1\n", want: `server.gc_min_growth_bytes: -1 is outside 0..1073741824 (1 GiB)`},
		{name: "server read buffer negative", toml: "[server]\nread_buffer = -1\n", want: `server.read_buffer: -1 is outside`},
		{name: "server read timeout negative", toml: "[server]\nread_timeout = \"-1s\"\n", want: `server.read_timeout: must be positive`},
		{name: "server shutdown timeout negative", toml: "[server]\nshutdown_timeout = \"-1s\"\n", want: `server.shutdown_timeout: must be positive`},
		{name: "server shutdown delay negative", toml: "[server]\nshutdown_delay = \"-1s\"\n", want: `server.shutdown_delay: -1s is outside 0..5m0s`},
		{name: "server shutdown delay too long", toml: "[server]\nshutdown_delay = \"6m\"\n", want: `server.shutdown_delay: 6m0s is outside 0..5m0s`},
		{name: "server shutdown delay", toml: "[server]\nshutdown_delay = \"10s\"\n"},
		{name: "provider connect timeout negative", toml: "[[providers]]\nname = \"q\"\nkind = \"openai\"\nbase_url = \"http://h\"\nconnect_timeout = \"-1s\"\n", want: `providers[1].connect_timeout: must be positive`},
		{name: "provider max conns negative", toml: "[[providers]]\nname = \"q\"\nkind = \"openai\"\nbase_url = \"http://h\"\nmax_conns = -1\n", want: `providers[1].max_conns: must be positive`},
		{name: "mock delay negative", toml: "[[providers]]\nname = \"q\"\nkind = \"mock\"\n[providers.mock]\nchunk_delay = \"-1ms\"\n", want: `providers[1].mock.chunk_delay: must be positive`},
		{name: "tool concurrency negative", toml: tool("concurrency = -1\n"), want: `tools[0].concurrency: must be positive`},
		{name: "tool cache ttl negative", toml: tool("cache_ttl = \"-1s\"\n"), want: `tools[0].cache_ttl: must be positive`},
		{name: "context edit keep negative", toml: "[middleware.context_edit]\nkeep = -1\n", want: `middleware.context_edit.keep: must be positive`},
		{name: "context edit trigger negative", toml: "[middleware.context_edit]\ntrigger = -0.5\n", want: `middleware.context_edit.trigger: -0.5 is negative`},
		{name: "default provider", toml: "[server]\ndefault_provider = \"z\"\n", want: `server.default_provider: unknown provider "z"`},
		{name: "provider name required", toml: "[[providers]]\nkind = \"mock\"\n", want: `providers[1].name: required`},
		{name: "provider name twice", toml: "[[providers]]\nname = \"p\"\nkind = \"mock\"\n", want: `providers[1].name: "p" is defined twice`},
		{name: "provider kind", toml: "[[providers]]\nname = \"q\"\nkind = \"grpc\"\n", want: `providers[1].kind: "grpc" is not one of openai, anthropic, mock`},
		{name: "anthropic valid", toml: "[[providers]]\nname = \"q\"\nkind = \"anthropic\"\nanthropic_beta = [\"a-2025-01-01\"]\n"},
		{name: "anthropic base url", toml: "[[providers]]\nname = \"q\"\nkind = \"anthropic\"\nbase_url = \"ftp://h\"\n", want: `providers[1].base_url: "ftp://h" is not an http(s) URL`},
		{name: "anthropic beta entry", toml: "[[providers]]\nname = \"q\"\nkind = \"anthropic\"\nanthropic_beta = [\"ok\", \"a,b\"]\n", want: `providers[1].anthropic_beta[1]: "a,b" is not a feature name`},
		{name: "anthropic prompt cache openai", toml: "[[providers]]\nname = \"q\"\nkind = \"anthropic\"\nprompt_cache = \"openai\"\n", want: `providers[1].prompt_cache: an anthropic provider caches with anthropic breakpoints or none`},
		{name: "anthropic responses native", toml: "[[providers]]\nname = \"q\"\nkind = \"anthropic\"\nresponses = \"native\"\n", want: `providers[1].responses: an anthropic provider has no Responses API: use translate`},
		{name: "anthropic version on openai", toml: prov("anthropic_version = \"2023-06-01\"\n"), want: `providers[1].anthropic_version: only for kind anthropic`},
		{name: "anthropic beta on openai", toml: prov("anthropic_beta = [\"x\"]\n"), want: `providers[1].anthropic_beta: only for kind anthropic`},
		{name: "model max tokens", toml: model("max_tokens = -1\n"), want: `models[1].max_tokens: must be positive`},
		{name: "redis negative db", toml: "[redis]\naddr = \"127.0.0.1:6379\"\ndb = -1\n", want: `redis.db: must not be negative`},
		{name: "redis password unset", toml: "[redis]\naddr = \"127.0.0.1:6379\"\npassword = \"${SURELY_UNSET_VAR_42}\"\n", want: `redis.password: is empty once read (an unset or blank ${NAME}); leave it out for none`},
		{name: "redis sentinel password unset", toml: "[redis]\nmode = \"sentinel\"\naddrs = [\"127.0.0.1:26379\"]\nmaster_name = \"m\"\nsentinel_password = \"${SURELY_UNSET_VAR_42}\"\n", want: `redis.sentinel_password: is empty once read`},
		{name: "provider header name", toml: prov("headers = { \"Bad Name\" = \"v\" }\n"), want: `providers[1].headers: "Bad Name" is not a header name`},
		{name: "provider header value", toml: prov("headers = { \"X-Key\" = \"a\\nb\" }\n"), want: `providers[1].headers.X-Key: the value holds a control character`},
		{name: "provider header value with a newline at its end", toml: prov("headers = { \"X-Key\" = \"abc\\n\" }\n")},
		{name: "provider api key with a control character", toml: "[[providers]]\nname = \"q\"\nkind = \"openai\"\nbase_url = \"http://h\"\napi_key = \"sk-\\u0001x\"\n", want: `providers[1].api_key: the value holds a control character`},
		{name: "tool header name", toml: tool("headers = { \"a:b\" = \"v\" }\n"), want: `tools[0].headers: "a:b" is not a header name`},
		{name: "provider header twice in two cases", toml: prov("headers = { \"X-Tag\" = \"one\", \"x-tag\" = \"two\" }\n"), want: `providers[1].headers: "X-Tag" and "x-tag" name the same header`},
		{name: "provider base url", toml: "[[providers]]\nname = \"q\"\nkind = \"openai\"\nbase_url = \"ftp://h\"\n", want: `providers[1].base_url: "ftp://h" is not an http(s) URL`},
		{name: "provider base url with user info", toml: "[[providers]]\nname = \"q\"\nkind = \"openai\"\nbase_url = \"https://user:pw@h/v1\"\n", want: `providers[1].base_url: holds user info (user:password@), which no request sends; set api_key or headers`},
		{name: "provider base url without host", toml: "[[providers]]\nname = \"q\"\nkind = \"openai\"\nbase_url = \"http://\"\n", want: `providers[1].base_url: "http:" is not an http(s) URL`},
		{name: "provider base url password hidden", toml: "[[providers]]\nname = \"q\"\nkind = \"openai\"\nbase_url = \"ftp://u:secret@h\"\n", want: `providers[1].base_url: "ftp://u:xxxxx@h" is not an http(s) URL`},
		{name: "provider responses", toml: prov("responses = \"proxy\"\n"), want: `providers[1].responses: "proxy" is not one of translate, native`},
		{name: "responses store", toml: "[responses]\nstore = \"disk\"\n", want: `responses.store: "disk" is not one of memory, redis, none`},
		{name: "responses store redis without redis", toml: "[responses]\nstore = \"redis\"\n", want: `responses.store: redis needs a [redis] section`},
		{name: "responses ttl", toml: "[responses]\nttl = \"-1s\"\n", want: `responses.ttl: must be positive`},
		{name: "responses max bytes", toml: "[responses]\nmax_bytes = -5\n", want: `responses.max_bytes: must be positive`},
		{name: "provider prompt cache", toml: prov("prompt_cache = \"all\"\n"), want: `providers[1].prompt_cache: "all" is not one of none, openai, anthropic`},
		{name: "provider max response bytes", toml: prov("max_response_bytes = -1\n"), want: `providers[1].max_response_bytes: must be positive`},
		{name: "provider read buffer", toml: prov("read_buffer = 100\n"), want: `providers[1].read_buffer: 100 is outside 1024..1048576 bytes`},
		{name: "provider retries below", toml: prov("retries = -1\n"), want: `providers[1].retries: -1 is outside 0..10`},
		{name: "provider retries above", toml: prov("retries = 11\n"), want: `providers[1].retries: 11 is outside 0..10`},
		{name: "model tool calling", toml: model("tool_calling = \"text\"\n"), want: `models[1].tool_calling: "text" is not one of native, prompted`},
		{name: "model prompted format", toml: model("tool_calling = \"prompted\"\nprompted_format = \"xml\"\n"), want: `models[1].prompted_format: "xml" is not one of fenced, json_schema`},
		{name: "model tool prompt", toml: model("tool_calling = \"prompted\"\ntool_prompt = \"no list\"\n"), want: `models[1].tool_prompt: must contain {tools}, where the tool list goes`},
		{name: "model tool prompt without prompted", toml: model("tool_prompt = \"{tools}\"\n"), want: `models[1].tool_calling: prompted_format and tool_prompt need tool_calling = "prompted"`},
		{name: "guardrail stage", toml: strings.Replace("[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n", "request", "output", 1), want: `guardrails[0].stage: "output" is not one of request, response, tool_input, tool_output`},
		{name: "guardrail kind", toml: strings.Replace("[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n", "pii", "magic", 1), want: `guardrails[0].kind: "magic" is not one of regex, pii, max_length, http`},
		{name: "guardrail action", toml: strings.Replace("[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n", "redact", "drop", 1), want: `guardrails[0].action: "drop" is not one of block, redact, flag`},
		{name: "guardrail pii kind", toml: "[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n" + "pii = [\"email\", \"ssn\"]\n", want: `guardrails[0].pii[1]: "ssn" is not one of email, phone, credit_card, iban, api_key`},
		{name: "guardrail regex pattern", toml: strings.Replace("[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n", "pii", "regex", 1) + "patterns = [\"(\"]\n", want: `guardrails[0].patterns[0]: error parsing regexp`},
		{name: "guardrail regex without patterns", toml: strings.Replace("[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n", "pii", "regex", 1), want: `guardrails[0].patterns: required for kind regex`},
		{name: "guardrail max length", toml: strings.Replace("[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n", "pii", "max_length", 1), want: `guardrails[0].max_length: required for kind max_length, and positive`},
		{name: "guardrail http url", toml: strings.Replace(strings.Replace("[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n", "pii", "http", 1), "redact", "block", 1) + "url = \"ftp://x\"\n", want: `guardrails[0].url: "ftp://x" is not an http(s) URL`},
		{name: "guardrail http fail", toml: strings.Replace(strings.Replace("[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n", "pii", "http", 1), "redact", "block", 1) + "url = \"http://x\"\nfail = \"maybe\"\n", want: `guardrails[0].fail: "maybe" is not one of open, closed`},
		{name: "guardrail tools on request", toml: "[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n" + "tools = [\"x\"]\n", want: `guardrails[0].tools: only for the tool_input and tool_output stages`},
		{name: "policy guardrail unknown", toml: "[[guardrails]]\nname = \"g\"\nstage = \"request\"\nkind = \"pii\"\naction = \"redact\"\n" + "[[policies]]\ntenant = \"*\"\nguardrails = [\"g\", \"nope\"]\n", want: `policies[0].guardrails[1]: unknown guardrail "nope"`},
		{name: "openapi spec required", toml: "[[openapi]]\nname = \"o\"\n", want: `openapi[0].spec: required: a file path or an http(s) URL`},
		{name: "openapi name twice", toml: "[[openapi]]\nname = \"o\"\nspec = \"s.yaml\"\n" + "[[openapi]]\nname = \"o\"\nspec = \"s.yaml\"\n", want: `openapi[1].name: "o" is defined twice`},
		{name: "openapi base url", toml: "[[openapi]]\nname = \"o\"\nspec = \"s.yaml\"\n" + "base_url = \"ftp://x\"\n", want: `openapi[0].base_url: "ftp://x" is not an http(s) URL`},
		{name: "openapi prefix", toml: "[[openapi]]\nname = \"o\"\nspec = \"s.yaml\"\n" + "prefix = \"a b\"\n", want: `openapi[0].prefix: "a b" must match [a-zA-Z0-9_-]{1,64}`},
		{name: "openapi operations", toml: "[[openapi]]\nname = \"o\"\nspec = \"s.yaml\"\n" + "operations = [\"[\"]\n", want: `openapi[0].operations[0]: bad pattern "["`},
		{name: "openapi timeout", toml: "[[openapi]]\nname = \"o\"\nspec = \"s.yaml\"\n" + "timeout = \"-1s\"\n", want: `openapi[0].timeout: must be positive`},
		{name: "model name required", toml: "[[models]]\nprovider = \"p\"\n", want: `models[1].name: required`},
		{name: "model name twice", toml: "[[models]]\nname = \"m\"\nprovider = \"p\"\n", want: `models[1].name: "m" is defined twice`},
		{name: "model without provider", toml: "[[models]]\nname = \"n\"\n", want: `models[1]: needs provider or deployments`},
		{name: "model provider shorthand", toml: "[[models]]\nname = \"n\"\nprovider = \"z\"\n", want: `models[1].provider: unknown provider "z"`},
		{name: "model deployment provider", toml: "[[models]]\nname = \"n\"\n[[models.deployments]]\nprovider = \"p\"\n[[models.deployments]]\nprovider = \"z\"\n", want: `models[1].deployments[1].provider: unknown provider "z"`},
		{name: "model deployment weight", toml: "[[models]]\nname = \"n\"\n[[models.deployments]]\nprovider = \"p\"\nweight = -1\n", want: `models[1].deployments[0].weight: must be positive`},
		{name: "model fallback unknown", toml: model("fallbacks = [\"m\", \"z\"]\n"), want: `models[1].fallbacks[1]: unknown model "z"`},
		{name: "fallbacks without the fallback layer", toml: model("fallbacks = [\"m\"]\nmiddleware = [\"prompt_cache\"]\n"), want: `models[1].fallbacks: need "fallback" in the model's middleware`},
		{name: "fallbacks without any layer", toml: model("fallbacks = [\"m\"]\nmiddleware = []\n"), want: `models[1].fallbacks: need "fallback" in the model's middleware`},
		{name: "cache without the cache layer", toml: "[middleware]\nrequest = [\"policy\", \"limits\"]\n[middleware.cache]\nenabled = true\n", want: `middleware.cache.enabled: true needs "cache" in middleware.request`},
		{name: "a policy's cache without the cache layer", toml: "[[policies]]\ntenant = \"*\"\nmodels = [\"*\"]\ncache = true\n[middleware]\nrequest = [\"policy\", \"limits\"]\n", want: `policies[0].cache: true needs "cache" in middleware.request`},
		{name: "model fallback itself", toml: model("fallbacks = [\"n\"]\n"), want: `models[1].fallbacks[0]: a model cannot fall back to itself`},
		{name: "model middleware", toml: model("middleware = [\"fallback\", \"magic\"]\n"), want: `models[1].middleware[1]: "magic" is not one of context_edit, prompt_cache, fallback`},
		{name: "model context window", toml: model("context_window = -1\n"), want: `models[1].context_window: must be positive`},
		{name: "model encoding", toml: model("encoding = \"utf8\"\n"), want: `models[1].encoding: "utf8" is not one of o200k_base, cl100k_base, p50k_base, r50k_base`},
		{name: "model price", toml: model("[models.price]\ninput = -1\n"), want: `models[1].price: prices must not be negative`},
		{name: "tool name", toml: "[[tools]]\nname = \"a b\"\nkind = \"builtin\"\n", want: `tools[0].name: "a b" must match [a-zA-Z0-9_-]{1,64}`},
		{name: "tool name twice", toml: tool("") + tool(""), want: `tools[1].name: "t" is defined twice`},
		{name: "tool parameters", toml: tool("parameters = \"{\"\n"), want: `tools[0].parameters: not valid JSON`},
		{name: "tool http url", toml: "[[tools]]\nname = \"t\"\nkind = \"http\"\nurl = \"h\"\n", want: `tools[0].url: "h" is not an http(s) URL`},
		{name: "tool agent model", toml: "[[tools]]\nname = \"t\"\nkind = \"agent\"\nmodel = \"z\"\n", want: `tools[0].model: unknown model "z"`},
		{name: "tool mcp kind", toml: "[[tools]]\nname = \"t\"\nkind = \"mcp\"\n", want: `tools[0].kind: MCP tools are not listed one by one`},
		{name: "tool kind", toml: "[[tools]]\nname = \"t\"\nkind = \"shell\"\n", want: `tools[0].kind: "shell" is not one of builtin, http, agent`},
		{name: "tool models pattern", toml: tool("models = [\"m\", \"[\"]\n"), want: `tools[0].models[1]: bad pattern "["`},
		{name: "tool approval", toml: tool("approval = \"sometimes\"\n"), want: `tools[0].approval: "sometimes" is not one of always, never`},
		{name: "tool approval always", toml: tool("approval = \"always\"\n")},
		{name: "mcp approval pattern", toml: mcp("approval = [\"delete_*\", \"[\"]\n"), want: `mcp_servers[0].approval[1]: bad pattern "["`},
		{name: "mcp name required", toml: "[[mcp_servers]]\ncommand = \"srv\"\n", want: `mcp_servers[0].name: required`},
		{name: "mcp name twice", toml: mcp("") + mcp(""), want: `mcp_servers[1].name: "s" is defined twice`},
		{name: "mcp neither command nor url", toml: "[[mcp_servers]]\nname = \"s\"\n", want: `mcp_servers[0]: set exactly one of command, url`},
		{name: "mcp command and url", toml: mcp("url = \"http://h\"\n"), want: `mcp_servers[0]: set exactly one of command, url`},
		{name: "mcp url", toml: "[[mcp_servers]]\nname = \"s\"\nurl = \"h\"\n", want: `mcp_servers[0].url: "h" is not an http(s) URL`},
		{name: "mcp headers on command", toml: mcp("headers = { A = \"b\" }\n"), want: `mcp_servers[0].headers: only for url (streamable HTTP) servers`},
		{name: "mcp args on url", toml: mcpURL("args = [\"a\"]\n"), want: `mcp_servers[0]: args and env are only for command (stdio) servers`},
		{name: "mcp env on url", toml: mcpURL("env = { A = \"b\" }\n"), want: `mcp_servers[0]: args and env are only for command (stdio) servers`},
		{name: "mcp prefix", toml: mcp("prefix = \"a b\"\n"), want: `mcp_servers[0].prefix: "a b" must match [a-zA-Z0-9_-]{1,64}`},
		{name: "mcp timeout", toml: mcp("timeout = \"-1s\"\n"), want: `mcp_servers[0].timeout: must be positive`},
		{name: "mcp allow pattern", toml: mcp("allow = [\"[\"]\n"), want: `mcp_servers[0].allow[0]: bad pattern "["`},
		{name: "mcp deny pattern", toml: mcp("deny = [\"a\", \"[\"]\n"), want: `mcp_servers[0].deny[1]: bad pattern "["`},
		{name: "mcp models pattern", toml: mcp("models = [\"[\"]\n"), want: `mcp_servers[0].models[0]: bad pattern "["`},
		{name: "request middleware", toml: "[middleware]\nrequest = [\"policy\", \"magic\"]\n", want: `middleware.request[1]: "magic" is not one of policy, limits, guardrails, cache`},
		{name: "request middleware twice", toml: "[middleware]\nrequest = [\"policy\", \"limits\", \"limits\"]\n", want: `middleware.request[2]: "limits" is listed twice`},
		// With guardrails, which the defaults place after policy, the index is still the file's.
		{name: "request middleware twice with guardrails", toml: "[middleware]\nrequest = [\"policy\", \"limits\", \"limits\"]\n[[guardrails]]\nname = \"g\"\nkind = \"regex\"\npatterns = [\"x\"]\n", want: `middleware.request[2]: "limits" is listed twice`},
		{name: "request middleware without policy under keys", toml: "[[keys]]\ntenant = \"t\"\nkey = \"sk-t\"\n[middleware]\nrequest = [\"limits\", \"cache\"]\n", want: `middleware.request: must start with "policy" when [[keys]] are set: it authenticates chat requests`},
		{name: "policies without the policy layer", toml: "[[policies]]\ntenant = \"*\"\nmodels = [\"m\"]\n[middleware]\nrequest = [\"cache\"]\n", want: `middleware.request: must list "policy" when [[policies]] are set`},
		{name: "model provider and deployments", toml: "[[models]]\nname = \"n\"\nprovider = \"p\"\n[[models.deployments]]\nprovider = \"p\"\n", want: `models[1].provider: set provider or deployments, not both`},
		{name: "model fallback twice", toml: model("fallbacks = [\"m\", \"m\"]\n"), want: `models[1].fallbacks[1]: "m" is listed twice`},
		{name: "model middleware twice", toml: model("middleware = [\"fallback\", \"fallback\"]\n"), want: `models[1].middleware[1]: "fallback" is listed twice`},
		{name: "keepalive below the minimum", toml: "[tool_loop]\nkeepalive_interval = \"1ns\"\n", want: `tool_loop.keepalive_interval: 1ns is below the minimum of 10ms`},
		{name: "base backoff above max", toml: "[middleware.fallback]\nbase_backoff = \"10s\"\nmax_backoff = \"1s\"\n", want: `middleware.fallback.base_backoff: 10s is above max_backoff (1s)`},
		{name: "approval secret unset", toml: "[tool_loop]\napproval_secret = \"${LLMGW_SURELY_UNSET_42}\"\n", want: `tool_loop.approval_secret: is empty once read and trimmed (an unset or blank ${NAME}); leave it out for a random key per process`},
		{name: "request middleware with policy late under keys", toml: "[[keys]]\ntenant = \"t\"\nkey = \"sk-t\"\n[middleware]\nrequest = [\"cache\", \"policy\"]\n", want: `middleware.request: must start with "policy" when [[keys]] are set: it authenticates chat requests`},
		{name: "request middleware without limits under budgets", toml: "[[budgets]]\ntenant = \"t\"\namount = 1.0\nperiod = \"day\"\n[middleware]\nrequest = [\"policy\", \"cache\"]\n", want: `middleware.request: must list "limits" when [[limits]] or [[budgets]] are set`},
		{name: "cache store", toml: "[middleware.cache]\nstore = \"disk\"\n", want: `middleware.cache.store: "disk" is not one of memory, redis`},
		{name: "shared breakers without redis", toml: "[middleware.fallback]\nshared_breakers = true\n", want: `middleware.fallback.shared_breakers: true needs a [redis] section`},
		{name: "cache store redis without redis", toml: "[middleware.cache]\nstore = \"redis\"\n", want: `middleware.cache.store: redis needs a [redis] section`},
		{name: "context edit last resort", toml: "[middleware.context_edit]\nlast_resort = \"panic\"\n", want: `middleware.context_edit.last_resort: "panic" is not one of error, drop_turns`},
		{name: "tool select model", toml: "[middleware.tool_select]\nmodel = \"z\"\n", want: `middleware.tool_select.model: unknown model "z"`},
		{name: "tool select max tools", toml: "[middleware.tool_select]\nmodel = \"m\"\nmax_tools = -1\n", want: `middleware.tool_select.max_tools: must be at least 1`},
		{name: "tool select min tools", toml: "[middleware.tool_select]\nmodel = \"m\"\nmin_tools = -2\n", want: `middleware.tool_select.min_tools: must be at least 1`},
		{name: "tool select min above max", toml: "[middleware.tool_select]\nmodel = \"m\"\nmax_tools = 3\nmin_tools = 5\n", want: `middleware.tool_select.min_tools: 5 is more than max_tools (3)`},
		{name: "tool select always include", toml: "[middleware.tool_select]\nmodel = \"m\"\nalways_include = [\"ok\", \"a b\"]\n", want: `middleware.tool_select.always_include[1]: "a b" must match [a-zA-Z0-9_-]{1,64}`},
		{name: "tool select per model", toml: model("[models.tool_select]\nmodel = \"z\"\n"), want: `models[1].tool_select.model: unknown model "z"`},
		{name: "tool select per model min above inherited max", toml: "[middleware.tool_select]\nmodel = \"m\"\nmax_tools = 4\n" + model("[models.tool_select]\nmin_tools = 6\n"), want: `models[1].tool_select.min_tools: 6 is more than max_tools (4)`},
		{name: "tool select valid", toml: "[middleware.tool_select]\nmodel = \"m\"\nmax_tools = 4\nalways_include = [\"calculator\"]\n" + model("[models.tool_select]\nenabled = false\n")},
		{name: "limits fail", toml: "[middleware.limits]\nfail = \"maybe\"\n", want: `middleware.limits.fail: "maybe" is not one of open, closed`},
		{name: "tracing protocol", toml: "[tracing]\nprotocol = \"udp\"\n", want: `tracing.protocol: "udp" is not one of http/protobuf, grpc`},
		{name: "tracing sample ratio", toml: "[tracing]\nsample_ratio = 2.0\n", want: `tracing.sample_ratio: must be between 0 and 1`},
		{name: "limit pattern", toml: "[[limits]]\ntenant = \"[\"\nconcurrent = 1\n", want: `limits[0].tenant: bad pattern "["`},
		{name: "limit negative", toml: "[[limits]]\nconcurrent = -1\n", want: `limits[0]: limits must not be negative`},
		{name: "limit empty", toml: "[[limits]]\ntenant = \"a\"\n", want: `limits[0]: set at least one of requests_per_minute, tokens_per_minute, concurrent, tool_calls_per_minute`},
		{name: "budget owner", toml: "[[budgets]]\namount = 1.0\n", want: `budgets[0]: set one of tenant, key`},
		{name: "budget amount", toml: "[[budgets]]\ntenant = \"a\"\n", want: `budgets[0].amount: must be positive (dollars)`},
		{name: "budget period", toml: "[[budgets]]\ntenant = \"a\"\namount = 1.0\nperiod = \"week\"\n", want: `budgets[0].period: "week" is not one of day, month, total`},
		{name: "budget warn at", toml: "[[budgets]]\ntenant = \"a\"\namount = 1.0\nwarn_at = 2.0\n", want: `budgets[0].warn_at: must be a fraction between 0 and 1`},
		{name: "key tenant", toml: "[[keys]]\nkey = \"k\"\n", want: `keys[0].tenant: required`},
		{name: "key tenant with a NUL", toml: "[[keys]]\ntenant = \"a\\u0000b\"\nkey = \"k\"\n", want: `keys[0].tenant: "a\x00b" has a control character`},
		{name: "key tenant with a tab", toml: "[[keys]]\ntenant = \"a\\tb\"\nkey = \"k\"\n", want: `keys[0].tenant: "a\tb" has a control character`},
		{name: "key without secret", toml: "[[keys]]\ntenant = \"a\"\n", want: `keys[0]: set key or sha256 (the ${ENV} reference may be unset)`},
		{name: "key and sha256", toml: "[[keys]]\ntenant = \"a\"\nkey = \"k\"\nsha256 = \"" + strings.Repeat("ab", 32) + "\"\n", want: `keys[0]: set only one of key, sha256`},
		{name: "key sha256", toml: "[[keys]]\ntenant = \"a\"\nsha256 = \"xyz\"\n", want: `keys[0].sha256: not 64 hex digits`},
		{name: "key role", toml: "[[keys]]\ntenant = \"a\"\nkey = \"k\"\nrole = \"root\"\n", want: `keys[0].role: "root" is not one of admin (or unset)`},
		{name: "policy tenant", toml: "[[policies]]\nmodels = [\"m\"]\n", want: `policies[0].tenant: required ("*" for every tenant)`},
		{name: "policy max tokens mode", toml: policy("max_tokens_mode = \"cut\"\n"), want: `policies[0].max_tokens_mode: "cut" is not one of clamp, reject`},
		{name: "policy models pattern", toml: policy("models = [\"[\"]\n"), want: `policies[0].models[0]: bad pattern "["`},
		{name: "policy tools pattern", toml: policy("tools = [\"[\"]\n"), want: `policies[0].tools[0]: bad pattern "["`},
		{name: "policy passthrough pattern", toml: policy("passthrough = [\"[\"]\n"), want: `policies[0].passthrough[0]: bad pattern "["`},
		{name: "policy passthrough without a slash", toml: policy("passthrough = [\"v1/embeddings\"]\n"), want: `policies[0].passthrough[0]: "v1/embeddings" matches no path`},
		{name: "policy passthrough every path", toml: policy("passthrough = [\"/v1/*\", \"*\"]\n")},
		{name: "tracing endpoint not a url", toml: "[tracing]\nenabled = true\nendpoint = \"collector:4318\"\n", want: `tracing.endpoint: "collector:4318" is not an http(s) URL`},
		{name: "tracing endpoint with user info", toml: "[tracing]\nenabled = true\nendpoint = \"http://u:p@collector:4318\"\n", want: `tracing.endpoint: takes no user info`},
		{name: "tracing endpoint with a query", toml: "[tracing]\nenabled = true\nendpoint = \"http://collector:4318?token=x\"\n", want: `tracing.endpoint: takes no query string: the OTLP exporter does not send one (put a token in [tracing] headers)`},
		{name: "policy approval tools pattern", toml: policy("approval_tools = [\"[\"]\n"), want: `policies[0].approval_tools[0]: bad pattern "["`},
		{name: "redis addr", toml: "[redis]\ndb = 1\n", want: `redis.addr: required`},
		{name: "redis timeout", toml: "[redis]\naddr = \"h:1\"\ntimeout = \"-1s\"\n", want: `redis.timeout: must be positive`},
		{name: "redis cluster", toml: "[redis]\nmode = \"cluster\"\naddrs = [\"h:1\", \"h:2\"]\n[redis.tls]\nenabled = true\n"},
		{name: "redis sentinel", toml: "[redis]\nmode = \"sentinel\"\naddrs = [\"h:1\"]\nmaster_name = \"m\"\nsentinel_password = \"p\"\ndb = 1\n"},
		{name: "redis mode", toml: "[redis]\nmode = \"shard\"\naddrs = [\"h:1\"]\n", want: `redis.mode: "shard" is not one of single, cluster, sentinel`},
		{name: "redis cluster without addrs", toml: "[redis]\nmode = \"cluster\"\n", want: `redis.addrs: required for mode "cluster"`},
		{name: "redis cluster with addr", toml: "[redis]\nmode = \"cluster\"\naddr = \"h:1\"\naddrs = [\"h:2\"]\n", want: `redis.addr: only for mode "single"`},
		{name: "redis cluster db", toml: "[redis]\nmode = \"cluster\"\naddrs = [\"h:1\"]\ndb = 2\n", want: `redis.db: a Redis Cluster has only db 0`},
		{name: "redis single with addrs", toml: "[redis]\naddr = \"h:1\"\naddrs = [\"h:2\"]\n", want: `redis.addrs: only for mode "cluster" or "sentinel"`},
		{name: "redis empty addrs entry", toml: "[redis]\nmode = \"cluster\"\naddrs = [\"h:1\", \"\"]\n", want: `redis.addrs[1]: must be host:port, not ""`},
		{name: "redis local port", toml: "[redis]\naddr = \":6379\"\n"},
		{name: "redis IPv6", toml: "[redis]\naddr = \"[::1]:6379\"\n"},
		// The client would fail every call at run time ("missing port").
		{name: "redis addr without port", toml: "[redis]\naddr = \"nohostport\"\n", want: `redis.addr: must be host:port, not "nohostport"`},
		{name: "redis addrs entry without port", toml: "[redis]\nmode = \"sentinel\"\nmaster_name = \"m\"\naddrs = [\"h:26379\", \"h2\"]\n", want: `redis.addrs[1]: must be host:port`},
		{name: "redis addr port out of range", toml: "[redis]\naddr = \"h:70000\"\n", want: `redis.addr: must be host:port`},
		{name: "redis sentinel without master", toml: "[redis]\nmode = \"sentinel\"\naddrs = [\"h:1\"]\n", want: `redis.master_name: required for mode "sentinel"`},
		{name: "redis master outside sentinel", toml: "[redis]\naddr = \"h:1\"\nmaster_name = \"m\"\n", want: `redis.master_name: only for mode "sentinel"`},
		{name: "redis sentinel password outside sentinel", toml: "[redis]\naddr = \"h:1\"\nsentinel_password = \"p\"\n", want: `redis.sentinel_password: only for mode "sentinel"`},
		{name: "redis tls cert without key", toml: "[redis]\naddr = \"h:1\"\n[redis.tls]\nenabled = true\ncert_file = \"c.pem\"\n", want: `redis.tls.cert_file: cert_file and key_file go together`},
		{name: "redis tls options while off", toml: "[redis]\naddr = \"h:1\"\n[redis.tls]\nca_file = \"ca.pem\"\n", want: `redis.tls.enabled: TLS options are set but enabled is false`},
		{name: "provider retry after cap", toml: prov("retry_after_cap = \"-1s\"\n"), want: `providers[1].retry_after_cap: must be positive`},
		{name: "tool timeout", toml: tool("timeout = \"-1s\"\n"), want: `tools[0].timeout: must be positive`},
		{name: "tool loop wall time", toml: "[tool_loop]\nwall_time = \"-1s\"\n", want: `tool_loop.wall_time: must be positive`},
		{name: "tool loop state max bytes", toml: "[tool_loop]\nstate_max_bytes = -1\n", want: `tool_loop.state_max_bytes: must be positive`},
		{name: "fallback breaker failures", toml: "[middleware.fallback]\nbreaker_failures = -1\n", want: `middleware.fallback.breaker_failures: must be positive`},
		{name: "cache ttl", toml: "[middleware.cache]\nttl = \"-1s\"\n", want: `middleware.cache.ttl: must be positive`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(validBase + tc.toml))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid config refused: %v", err)
			case tc.want == "":
			case err == nil:
				t.Fatalf("accepted; want %q", tc.want)
			case !strings.Contains(err.Error(), tc.want):
				t.Fatalf("got %v\nwant it to contain %q", err, tc.want)
			}
		})
	}
}

// TestValidateReportsEveryProblemInOrder checks that validate keeps going
// after a problem and reports them in the order of the file's sections.
func TestValidateReportsEveryProblemInOrder(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(validBase + "[server]\nlog_level = \"loud\"\n[[tools]]\nname = \"t\"\nkind = \"shell\"\n[redis]\ndb = 1\n"))
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	a, b, c := strings.Index(msg, "server.log_level"), strings.Index(msg, "tools[0].kind"), strings.Index(msg, "redis.addr")
	if a < 0 || b < a || c < b {
		t.Fatalf("problems missing or out of order:\n%v", err)
	}
}

// The listen addresses are checked once -listen has had its say (the
// command calls CheckListen after it): a file's listen may be a
// placeholder the flag replaces.
func TestCheckListen(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ listen, metrics, want string }{
		{"127.0.0.1:8080", "", ""},
		{"[::1]:8080", "127.0.0.1:9090", ""},
		{"127.0.0.1:0", "127.0.0.1:0", ""}, // each its own port
		{":http", "", ""},
		{"notanaddress", "", `server.listen: "notanaddress" is not host:port`},
		{"127.0.0.1:99999", "", `server.listen: "127.0.0.1:99999": the port is neither a number in 0..65535 nor a service name`},
		{"127.0.0.1:9000", "127.0.0.1:9000", `server.metrics_listen: "127.0.0.1:9000" takes listen's port`},
		{":27080", "127.0.0.1:27080", `server.metrics_listen: "127.0.0.1:27080" takes listen's port`},
		{"127.0.0.1:8080", "x:y:z", `server.metrics_listen: "x:y:z" is not host:port`},
	} {
		err := (&Server{Listen: c.listen, MetricsListen: c.metrics}).CheckListen()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("listen %q metrics %q: %v, want %q", c.listen, c.metrics, err, c.want)
		}
	}
	// A file's placeholder is no error for Parse: the flag may replace it.
	if _, err := Parse([]byte("[server]\nlisten = \"${LLMGW_SURELY_UNSET_LISTEN}\"\n")); err != nil {
		t.Fatal(err)
	}
}
