package config

import (
	"strings"
	"testing"
)

// An anthropic provider gets Anthropic's URL, API version and prompt
// caching unless it says otherwise.
func TestAnthropicProviderDefaults(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("[[providers]]\nname = \"a\"\nkind = \"anthropic\"\n[[providers]]\nname = \"b\"\nkind = \"anthropic\"\nprompt_cache = \"none\"\nbase_url = \"http://127.0.0.1:9\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	a, b := c.Providers[0], c.Providers[1]
	if a.BaseURL != "https://api.anthropic.com" || a.AnthropicVersion != "2023-06-01" || a.PromptCache != "anthropic" {
		t.Errorf("defaults %+v", a)
	}
	if b.BaseURL != "http://127.0.0.1:9" || b.PromptCache != "none" {
		t.Errorf("explicit settings replaced: %+v", b)
	}
}

// An openai provider must say where it is: a base_url that is missing, or
// that expands from an unset variable to nothing, is refused, never
// replaced by OpenAI's (which would send that provider's key and every
// prompt to OpenAI).
func TestOpenAIProviderNeedsBaseURL(t *testing.T) {
	t.Setenv("LLMGW_TEST_UNSET_URL", "")
	for _, doc := range []string{
		"[[providers]]\nname = \"a\"\nkind = \"openai\"\napi_key = \"sk\"\n",
		"[[providers]]\nname = \"a\"\nkind = \"openai\"\napi_key = \"sk\"\nbase_url = \"${LLMGW_TEST_UNSET_URL}\"\n",
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "base_url") {
			t.Errorf("%q: %v, want base_url refused", doc, err)
		}
	}
}
