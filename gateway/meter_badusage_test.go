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

// A stream whose content chunks each carry a usage whose counts are no
// counts is charged as one without usage: the output estimate of its
// chunks. The chunks were taken for usage chunks and not counted, so the
// call was charged no output at all.
func TestMeterBadUsageOnContentChunks(t *testing.T) {
	t.Parallel()
	charged := map[string]int64{}
	for _, usage := range []string{"", `,"usage":{"prompt_tokens":"5","completion_tokens":"1"}`} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			for range 20 {
				fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{"content":"word "},"finish_reason":null}]`+usage+`}`+"\n\n")
			}
			fmt.Fprint(w, `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`+usage+`}`+"\n\ndata: [DONE]\n\n")
		}))
		t.Cleanup(up.Close)
		h := newHarness(t, strings.ReplaceAll(baseConfig, "{{MOCK}}", up.URL+"/v1")+"\n[[limits]]\ntenant = \"*\"\ntokens_per_minute = 1000000\n", mockllm.Options{})
		if st, _, s := h.post("/chat/completions", `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`, nil); st != 200 {
			t.Fatalf("%d %s", st, s)
		}
		_, _, body := getUsage(t, h.base, "")
		charged[usage] = gjson.GetBytes(body, "total.output_tokens").Int()
	}
	if none, bad := charged[""], charged[`,"usage":{"prompt_tokens":"5","completion_tokens":"1"}`]; none < 20 || bad != none {
		t.Fatalf("output charged: %d without usage, %d with a bad usage on every chunk", none, bad)
	}
}
