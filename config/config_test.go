package config

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestParseErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ name, toml, want string }{
		{"unknown key names line", "[server]\nlisten = \"x\"\n\nlisen = 1\n", `line 4: unknown key "server.lisen"`},
		{"unknown tool select key", "[middleware.tool_select]\nmodel = \"x\"\nmax_tool = 3\n", `line 3: unknown key "middleware.tool_select.max_tool"`},
		{"unknown table", "[servr]\nlisten = \"x\"\n", `unknown key "servr`},
		// A key inside an inline table is named with the tables around it.
		{"unknown key in an inline table", "[[models]]\nname = \"m\"\nprice = {input = 1.0, outptu = 2.0}\n", `line 3: unknown key "models.price.outptu"`},
		{"unknown key in an array of inline tables", "[[models]]\nname = \"m\"\ndeployments = [{provider = \"p\", wieght = 2}]\n", `line 3: unknown key "models.deployments.wieght"`},
		{"bad duration", "[server]\nread_timeout = \"soon\"\n", "line 2"},
		// A bare number would be nanoseconds: every call would time out.
		{"bare duration", "[server]\nwrite_timeout = 5\n", `line 2: server.write_timeout: a duration is a string with a unit`},
		{"bare duration in an array table", "[[providers]]\nname=\"p\"\nkind=\"mock\"\nconnect_timeout = 30\n", `line 4: providers[0].connect_timeout: a duration is a string with a unit`},
		{"bare duration in a nested table", "[tool_loop]\nwall_time = 1.5\n", `line 2: tool_loop.wall_time: a duration is a string with a unit`},
		// A value of the wrong type is named by its key, not a Go field.
		{"string for a number", "[server]\nmax_body_bytes = \"big\"\n", `line 2: server.max_body_bytes: want a whole number, got a string`},
		{"number for a string", "[[providers]]\nname = 5\n", `line 2: providers[0].name: want a string, got an integer`},
		{"string for a list", "[[models]]\nname = \"m\"\nfallbacks = \"x\"\n", `line 3: models[0].fallbacks: want a list, got a string`},
		{"bad kind", "[[providers]]\nname=\"p\"\nkind=\"grpc\"\n", `providers[0].kind: "grpc" is not one of openai, anthropic, mock`},
		{"bad base url", "[[providers]]\nname=\"p\"\nkind=\"openai\"\nbase_url=\"ftp://x\"\n", `providers[0].base_url`},
		{"unknown provider", "[[models]]\nname=\"m\"\nprovider=\"nope\"\n", `line 3: models[0].provider: unknown provider "nope"`},
		{"unknown fallback", "[[providers]]\nname=\"p\"\nkind=\"mock\"\n[[models]]\nname=\"m\"\nprovider=\"p\"\nfallbacks=[\"x\"]\n", `models[0].fallbacks[0]: unknown model "x"`},
		{"bad middleware", "[[providers]]\nname=\"p\"\nkind=\"mock\"\n[[models]]\nname=\"m\"\nprovider=\"p\"\nmiddleware=[\"magic\"]\n", `models[0].middleware[0]: "magic"`},
		{"bad tool name", "[[tools]]\nname=\"a b\"\nkind=\"builtin\"\n", `tools[0].name`},
		{"bad tool schema", "[[tools]]\nname=\"t\"\nkind=\"builtin\"\nparameters=\"{\"\n", `tools[0].parameters: not valid JSON`},
		{"key without secret", "[[keys]]\ntenant=\"a\"\nkey=\"${SURELY_UNSET_VAR_42}\"\n", `keys[0]: set key or sha256`},
		{"bad sha", "[[keys]]\ntenant=\"a\"\nsha256=\"abc\"\n", `keys[0].sha256`},
		{"no provider while an optional one is dropped", "[[providers]]\nname=\"o\"\nkind=\"openai\"\nbase_url=\"https://x.example\"\noptional=true\n[[models]]\nname=\"m\"\n", `line 6: models[0]: needs provider or deployments`},
		{"unnamed optional provider without a key", "[[providers]]\nkind=\"openai\"\nbase_url=\"https://x.example\"\noptional=true\n[[models]]\nname=\"m\"\n", `line 1: providers[0].name: required`},
		{"redis store without redis", "[middleware.cache]\nstore=\"redis\"\n", `redis needs a [redis] section`},
		{"negative response limit", "[[providers]]\nname=\"p\"\nkind=\"mock\"\nmax_response_bytes=-1\n", `providers[0].max_response_bytes: must be positive`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse([]byte(c.toml))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestEnvAndOptionalProviders(t *testing.T) {
	t.Setenv("GW_TEST_KEY", "sk-123")
	t.Setenv("GW_TEST_EMPTY", "")
	c, err := Parse([]byte(`
[server]
admin_key = "${GW_TEST_KEY}-admin"
[[providers]]
name = "a"
kind = "openai"
base_url = "https://api.example.com/v1"
api_key = "${GW_TEST_KEY}"
headers = { X-Org = "org-${GW_TEST_KEY}" }
[[providers]]
name = "b"
kind = "openai"
base_url = "https://b.example.com/v1"
api_key = "${GW_TEST_EMPTY}"
optional = true
[[models]]
name = "ma"
provider = "a"
fallbacks = ["mb"]
[[models]]
name = "mb"
provider = "b"
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.AdminKey != "sk-123-admin" {
		t.Fatalf("server.admin_key is not expanded: %q", c.Server.AdminKey)
	}
	if c.Providers[0].APIKey != "sk-123" || c.Providers[0].Headers["X-Org"] != "org-sk-123" {
		t.Fatalf("expansion: %+v", c.Providers[0])
	}
	if len(c.Providers) != 1 || len(c.Models) != 1 || len(c.Models[0].Fallbacks) != 0 {
		t.Fatalf("optional provider with an empty key should drop with its models: %+v %+v", c.Providers, c.Models)
	}
	m := c.Models[0]
	if m.Upstream != "ma" || len(m.Deployments) != 1 || m.Deployments[0].Weight != 1 || m.Encoding != "o200k_base" {
		t.Fatalf("defaults: %+v", m)
	}
	if *c.Providers[0].Retries != 2 || c.Server.Listen != "127.0.0.1:8080" || c.ToolLoop.MaxIterations != 10 {
		t.Fatal("defaults not set")
	}
}

func TestShippedConfigIsValid(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	c, err := Load("../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Models) != 2 || c.Models[0].Name != "demo" || c.Models[1].Name != "demo-text" {
		t.Fatalf("offline, only the demo models should remain: %+v", c.Models)
	}
	t.Setenv("OPENAI_API_KEY", "sk-test")
	if c, err = Load("../config.toml"); err != nil || len(c.Models) < 3 {
		t.Fatalf("with a key, the OpenAI models appear: %v %d", err, len(c.Models))
	}
	// The README's quick start: the OpenAI models fall back to demo
	// (fallbacks do not chain, so each lists it).
	for _, m := range c.Models {
		if m.Provider == "openai" && !slices.Contains(m.Fallbacks, "demo") {
			t.Errorf("%s does not fall back to demo: %v", m.Name, m.Fallbacks)
		}
	}
	_ = os.Getenv
}

func TestDuplicateKeyNamesRefused(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(`
[[providers]]
name = "up"
kind = "mock"
[[models]]
name = "m"
provider = "up"
[[keys]]
name = "ci"
tenant = "a"
key = "k-aaaaaaaa"
[[keys]]
name = "ci"
tenant = "b"
key = "k-bbbbbbbb"
`))
	if err == nil || !strings.Contains(err.Error(), `keys[1].name: "ci" is already the name of keys[0]`) {
		t.Fatalf("duplicate key names: %v", err)
	}
}

// TestGCMinGrowthZeroStays: 0 turns the collector's floor off; it is not
// taken for unset.
func TestGCMinGrowthZeroStays(t *testing.T) {
	c, err := Parse([]byte("[server]\ngc_min_growth_bytes = 0\n[[providers]]\nname = \"a\"\nkind = \"openai\"\nbase_url = \"https://api.example.com/v1\"\n[[models]]\nname = \"m\"\nprovider = \"a\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Server.GCMinGrowthBytes; g == nil || *g != 0 {
		t.Fatalf("gc_min_growth_bytes = 0 became %v", g)
	}
}

// A value from the environment in the wrong field (a key as a base_url)
// is not printed by the error that says so: at start and by -check the
// log redactor does not know it yet.
func TestValidationErrorsMaskEnvironmentValues(t *testing.T) {
	t.Setenv("LLMGW_TEST_KEY", "sk-SECRETVALUE123")
	for _, toml := range []string{
		"[[providers]]\nname=\"p\"\nkind=\"openai\"\nbase_url=\"${LLMGW_TEST_KEY}\"\n",
		"[[tools]]\nname=\"t\"\nkind=\"http\"\nurl=\"${LLMGW_TEST_KEY}/x\"\n",
		"[[providers]]\nname=\"p\"\nkind=\"openai\"\nbase_url=\"ftp://h/${LLMGW_TEST_KEY}\"\n",
	} {
		_, err := Parse([]byte(toml))
		if err == nil || strings.Contains(err.Error(), "SECRETVALUE") || !strings.Contains(err.Error(), "not an http(s) URL") {
			t.Errorf("%q: %v", toml, err)
		}
	}
	// A value that went into a secret field is masked whatever its
	// variable's name; one that is no secret (a host) stays readable.
	t.Setenv("LLMGW_TEST_VALUE", "opaque-SECRETVALUE-9")
	t.Setenv("LLMGW_TEST_HOST", "localhost")
	_, err := Parse([]byte("[[providers]]\nname=\"p\"\nkind=\"openai\"\napi_key=\"${LLMGW_TEST_VALUE}\"\nbase_url=\"${LLMGW_TEST_VALUE}\"\n"))
	if err == nil || strings.Contains(err.Error(), "SECRETVALUE") {
		t.Errorf("a secret field's value: %v", err)
	}
	_, err = Parse([]byte("[[tools]]\nname=\"t\"\nkind=\"http\"\nurl=\"${LLMGW_TEST_HOST}/x\"\n"))
	if err == nil || !strings.Contains(err.Error(), `"localhost/x"`) {
		t.Errorf("a host: %v", err)
	}
}

// An optional provider without a key is left out and named in Dropped,
// which the build logs: it was dropped without a word.
func TestDroppedProvidersAreNamed(t *testing.T) {
	c, err := Parse([]byte("[[providers]]\nname=\"o\"\nkind=\"openai\"\nbase_url=\"https://x.example\"\noptional=true\napi_key=\"${SURELY_UNSET_VAR_42}\"\n" +
		"[[providers]]\nname=\"m\"\nkind=\"mock\"\n[[models]]\nname=\"a\"\nprovider=\"o\"\n[[models]]\nname=\"b\"\nprovider=\"m\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Dropped) != 1 || c.Dropped[0] != "o" || len(c.Providers) != 1 || len(c.Models) != 1 {
		t.Fatalf("dropped %v, providers %d, models %d", c.Dropped, len(c.Providers), len(c.Models))
	}
}

// A setting that needs a model an optional provider took with it (a
// summary model, a tool selector, an agent tool's model) is refused with
// why: the error said the model was not configured, though the file
// configures it (a docs probe: the shipped config with the README's
// context-editing snippet, without OPENAI_API_KEY).
func TestSettingNamingADroppedModelSaysWhy(t *testing.T) {
	base := "[[providers]]\nname=\"o\"\nkind=\"openai\"\nbase_url=\"https://x.example\"\noptional=true\napi_key=\"${SURELY_UNSET_VAR_42}\"\n" +
		"[[providers]]\nname=\"m\"\nkind=\"mock\"\n[[models]]\nname=\"small\"\nprovider=\"o\"\n[[models]]\nname=\"pooled\"\ndeployments=[{provider=\"o\"}]\n" +
		"[[models]]\nname=\"b\"\nprovider=\"m\"\n"
	why := `model %q was left out with its optional provider "o", whose api_key is empty`
	for _, c := range []struct{ toml, key, model string }{
		{"[middleware.context_edit]\nlast_resort=\"summarize\"\nsummary_model=\"small\"\n", "middleware.context_edit.summary_model", "small"},
		{"[middleware.tool_select]\nmodel=\"pooled\"\n", "middleware.tool_select.model", "pooled"},
		{"[[tools]]\nname=\"t\"\nkind=\"agent\"\nmodel=\"small\"\n", "tools[0].model", "small"},
	} {
		_, err := Parse([]byte(base + c.toml))
		if err == nil || !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), fmt.Sprintf(why, c.model)) {
			t.Errorf("%s: %v", c.key, err)
		}
	}
	if _, err := Parse([]byte(base + "[[tools]]\nname=\"t\"\nkind=\"agent\"\nmodel=\"nosuch\"\n")); err == nil || !strings.Contains(err.Error(), `unknown model "nosuch"`) {
		t.Errorf("a model never configured: %v", err)
	}
}

// Header values and an api_key from the environment lose the whitespace
// around them (a key read from a file keeps its newline), which HTTP does
// not count as part of a value.
func TestHeaderValuesTrimmed(t *testing.T) {
	t.Setenv("LLMGW_TEST_FILE_KEY", "sk-abc123\n")
	c, err := Parse([]byte("[[providers]]\nname=\"p\"\nkind=\"openai\"\nbase_url=\"https://x.example\"\napi_key=\"${LLMGW_TEST_FILE_KEY}\"\n" +
		"headers = { X-Key = \"${LLMGW_TEST_FILE_KEY}\" }\n[[models]]\nname=\"m\"\nprovider=\"p\"\n" +
		"[server]\nadmin_key = \"${LLMGW_TEST_FILE_KEY}\"\n[[keys]]\ntenant = \"t\"\nkey = \"${LLMGW_TEST_FILE_KEY}\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Providers[0]; p.APIKey != "sk-abc123" || p.Headers["X-Key"] != "sk-abc123" || c.Server.AdminKey != "sk-abc123" || c.Keys[0].Key != "sk-abc123" {
		t.Fatalf("api_key %q, header %q, admin key %q, key %q", p.APIKey, p.Headers["X-Key"], c.Server.AdminKey, c.Keys[0].Key)
	}
	// Only HTTP's whitespace and a line end: a no-break space is part of
	// the key, as a request's header keeps it.
	c, err = Parse([]byte("[[providers]]\nname=\"p\"\nkind=\"mock\"\n[[models]]\nname=\"m\"\nprovider=\"p\"\n" +
		"[[keys]]\ntenant = \"t\"\nkey = \"\tk\u00a0 \"\n"))
	if err != nil || c.Keys[0].Key != "k\u00a0" {
		t.Fatalf("key %q %v", c.Keys[0].Key, err)
	}
}

// A bare 0 is 0 in any unit: the default, or off where 0 is off.
func TestBareZeroDuration(t *testing.T) {
	if _, err := Parse([]byte("[server]\nwrite_timeout = 0\n[[tools]]\nname=\"t\"\nkind=\"builtin\"\ncache_ttl = 0\n")); err != nil {
		t.Fatal(err)
	}
}

// A setting written in another case than its own is refused, by line: the
// decoder matched it to the lower-case setting, so [[Keys]] after [[keys]]
// replaced the first list and a Models list widened a policy's models
// while -check said ok.
func TestMiscasedSettingsAreRefused(t *testing.T) {
	base := "[[providers]]\nname=\"m\"\nkind=\"mock\"\n[[models]]\nname=\"a\"\nprovider=\"m\"\n"
	for _, c := range []struct{ toml, want string }{
		{"[[keys]]\ntenant=\"t\"\nkey=\"k1\"\n[[Keys]]\ntenant=\"u\"\nkey=\"k2\"\n", `line 10: Keys: setting names are lower case: write "keys"`},
		{"[[policies]]\ntenant=\"*\"\nmodels=[]\nModels=[\"*\"]\n", `line 10: policies[0].Models: setting names are lower case: write "models"`},
		{"[Server]\nlisten=\"127.0.0.1:1\"\n", `line 7: Server: setting names are lower case: write "server"`},
	} {
		_, err := Parse([]byte(base + c.toml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.toml, err, c.want)
		}
	}
	if _, err := Parse([]byte(base + "[[keys]]\ntenant=\"t\"\nkey=\"k1\"\n")); err != nil {
		t.Fatal(err)
	}
}

// A shell-style reference (${NAME:-default}, ${}) in a field read from the
// environment is refused by its line, without its default or the value
// around it: the whole value was taken as written (a key
// "${GW_KEY:-changeme}" worked as that text, an optional provider sent
// "${OPENAI_API_KEY:-}" as its key).
func TestMalformedEnvReferencesAreRefused(t *testing.T) {
	t.Setenv("LLMGW_TEST_MAL", "real")
	base := "[[providers]]\nname=\"m\"\nkind=\"mock\"\n[[models]]\nname=\"a\"\nprovider=\"m\"\n"
	for _, c := range []struct{ toml, want string }{
		{"[[keys]]\ntenant=\"t\"\nkey=\"${LLMGW_TEST_MAL:-changeme}\"\n", `line 9: "${LLMGW_TEST_MAL:" starts a shell-style reference`},
		{"[[keys]]\ntenant=\"t\"\nkey=\"${LLMGW_TEST_MAL-sk-very-secret}\"\n", `line 9: "${LLMGW_TEST_MAL-" starts a shell-style reference`},
		{"[[keys]]\ntenant=\"t\"\nkey=\"${LLMGW_TEST_MAL\"\n", `line 9: "${LLMGW_TEST_MAL" starts a shell-style reference`},
		{"[[keys]]\ntenant=\"t\"\nkey=\"${ LLMGW_TEST_MAL }\"\n", `line 9: "${ LLMGW_TEST_MAL " starts a shell-style reference`},
		{"[[providers]]\nname=\"o\"\nkind=\"openai\"\nbase_url=\"https://x.example\"\noptional=true\napi_key=\"${}\"\n", `line 12: "${}" starts`},
	} {
		_, err := Parse([]byte(base + c.toml))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "very-secret") {
			t.Errorf("%q: %v, want %q", c.toml, err, c.want)
		}
	}
	c, err := Parse([]byte(base + "[[keys]]\ntenant=\"t\"\nkey=\"${LLMGW_TEST_MAL}-x\"\n"))
	if err != nil || c.Keys[0].Key != "real-x" {
		t.Fatalf("a well-formed reference: %v", err)
	}
	// Another "${" (a password may hold one) is taken as written.
	c, err = Parse([]byte(base + "[[keys]]\ntenant=\"t\"\nkey=\"Zx9${%q-TOP\"\n"))
	if err != nil || c.Keys[0].Key != "Zx9${%q-TOP" {
		t.Fatalf("a key holding ${: %v", err)
	}
}

// A [[limits]] or [[budgets]] name that no key has is reported (the
// limiter warns: a typo applies the rule to nobody), not refused: a reload
// that revokes a key its rules still name must go through.
func TestUnknownCallers(t *testing.T) {
	c, err := Parse([]byte("[[providers]]\nname=\"m\"\nkind=\"mock\"\n[[models]]\nname=\"a\"\nprovider=\"m\"\n" +
		"[[keys]]\nname=\"alice\"\ntenant=\"team-a\"\nkey=\"sk-1\"\n[[keys]]\ntenant=\"team-b\"\nkey=\"sk-2\"\n" +
		"[[limits]]\ntenant=\"team_a\"\nrequests_per_minute=1\n[[limits]]\ntenant=\"team-*\"\nkey=\"alice\"\nrequests_per_minute=1\n" +
		"[[budgets]]\nkey=\"alcie\"\namount=1\n[[budgets]]\nkey=\"keys[1]\"\namount=1\n[[budgets]]\ntenant=\"team-b\"\namount=1\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(c.UnknownCallers())
	if want := "[[limits[0].tenant team_a] [budgets[0].key alcie]]"; got != want {
		t.Fatalf("unknown callers %s, want %s", got, want)
	}
}
