package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// A JSON answer of one round keeps the members of the upstream's usage the
// gateway does not read (OpenRouter's cost, DeepSeek's cache hit and miss
// counts) and its counts, whether or not the request offers client tools
// (which takes it through the tool loop): the loop rewrote the usage to its
// own sum of the one round and dropped them.
func TestClientToolsJSONKeepsUsage(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],`+
			`"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8,"cost":0.0012,"prompt_cache_hit_tokens":4,"prompt_cache_miss_tokens":1}}`)
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	base := `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]%s}`
	st1, _, plain := h.post("/chat/completions", fmt.Sprintf(base, ""), nil)
	st2, _, tools := h.post("/chat/completions", fmt.Sprintf(base, `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`), nil)
	pu, tu := gjson.GetBytes(plain, "usage"), gjson.GetBytes(tools, "usage")
	same := true
	for _, k := range []string{"prompt_tokens", "completion_tokens", "total_tokens", "cost", "prompt_cache_hit_tokens", "prompt_cache_miss_tokens"} {
		same = same && pu.Get(k).Raw == tu.Get(k).Raw
	}
	if st1 != 200 || st2 != 200 || !same || tu.Get("cost").Raw != "0.0012" {
		t.Errorf("usage without tools %d %s, with a client tool %d %s", st1, pu.Raw, st2, tu.Raw)
	}
}

// A loop's answer whose upstream usage has counts that are no counts
// carries no usage, JSON and stream alike: the stream sent no usage chunk
// while the JSON answer showed the negative counts.
func TestLoopDropsUsageThatIsNoCount(t *testing.T) {
	t.Parallel()
	const usage = `{"prompt_tokens":-5,"completion_tokens":3,"total_tokens":-2}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !gjson.GetBytes(body, "stream").Bool() {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":`+usage+`}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`+"\n\n")
		fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[],"usage":`+usage+`}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(up.Close)
	h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1"), mockllm.Options{})
	tools := `,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}]`
	st, _, js := h.post("/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"hi"}]`+tools+`}`, nil)
	ss, _, sse := h.post("/chat/completions", `{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]`+tools+`}`, nil)
	if st != 200 || ss != 200 || gjson.GetBytes(js, "usage").Exists() || strings.Contains(string(sse), `"usage":{`) {
		t.Errorf("JSON %d %s\nstream %d %s", st, js, ss, sse)
	}
}
