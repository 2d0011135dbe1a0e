package proxy

import (
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/config"
)

// An anthropic provider posts to /v1/messages whether base_url names the
// /v1 or not, with x-api-key and never a bearer token.
func TestAnthropicProviderRequest(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"https://api.anthropic.com", "https://api.anthropic.com/", "https://api.anthropic.com/v1"} {
		pc, err := newProviderClient(config.Provider{Name: "a", Kind: "anthropic", BaseURL: base, APIKey: "sk-ant",
			AnthropicVersion: "2023-06-01", AnthropicBeta: []string{"x-1", "y-2"}})
		if err != nil {
			t.Fatal(err)
		}
		if pc.chatURI != "https://api.anthropic.com/v1/messages" {
			t.Errorf("%s: %s", base, pc.chatURI)
		}
		var h fasthttp.RequestHeader
		pc.setHeaders(&h, "req_1")
		if string(h.Peek("X-Api-Key")) != "sk-ant" || len(h.Peek("Authorization")) != 0 || string(h.Peek("Anthropic-Version")) != "2023-06-01" ||
			string(h.Peek("Anthropic-Beta")) != "x-1,y-2" || string(h.Peek("X-Request-Id")) != "req_1" {
			t.Errorf("%s: headers %s", base, h.String())
		}
	}
}

// A request to a provider other than anthropic goes without the tool
// loop's thinking member, wherever it sits in a message; a body without
// it is sent as is, and text that merely names it is kept.
func TestWithoutThinking(t *testing.T) {
	t.Parallel()
	const blocks = `[{"type":"thinking","thinking":"t","signature":"s"}]`
	tests := []struct{ name, body, want string }{
		{"none", `{"messages":[{"role":"user","content":"x"}]}`, `{"messages":[{"role":"user","content":"x"}]}`},
		{"named in text", `{"messages":[{"role":"user","content":"x_gateway_thinking"}]}`, `{"messages":[{"role":"user","content":"x_gateway_thinking"}]}`},
		{"last member", `{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[],"x_gateway_thinking":` + blocks + `}]}`,
			`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,"tool_calls":[]}]}`},
		{"first member, twice", `{"messages":[{"x_gateway_thinking":` + blocks + `,"role":"assistant"},{"role":"tool","content":"1"},{"x_gateway_thinking":[],"role":"assistant"}]}`,
			`{"messages":[{"role":"assistant"},{"role":"tool","content":"1"},{"role":"assistant"}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in := []byte(tc.body)
			out := withoutThinking(in)
			if string(out) != tc.want || string(in) != tc.body {
				t.Errorf("got %s (input now %s)", out, in)
			}
		})
	}
}
