package config

import "testing"

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

// An openai provider without base_url calls OpenAI, as the config
// reference says; one with its own keeps it.
func TestOpenAIProviderDefaultURL(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte("[[providers]]\nname = \"a\"\nkind = \"openai\"\napi_key = \"sk\"\n[[providers]]\nname = \"b\"\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := c.Providers[0].BaseURL, c.Providers[1].BaseURL; a != "https://api.openai.com/v1" || b != "http://127.0.0.1:9/v1" {
		t.Errorf("base_url %q and %q", a, b)
	}
}
