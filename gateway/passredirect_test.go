package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"
)

// A pass-through answer that is a redirect never reaches the client: its
// Location is the upstream's choice, and an SDK follows it with the
// tenant's request and its key to the gateway. It is a 502 in the OpenAI
// envelope; a 304, the answer to the client's own conditional request, is
// relayed.
func TestPassthroughRedirectIsNotRelayed(t *testing.T) {
	t.Parallel()
	h := harnessOn(t, baseConfig+openPassthrough, &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if strings.HasSuffix(string(ctx.Path()), "/content") {
			ctx.SetStatusCode(fasthttp.StatusNotModified)
			return
		}
		ctx.Response.Header.Set("Location", "http://127.0.0.1:1/elsewhere")
		ctx.SetStatusCode(fasthttp.StatusTemporaryRedirect)
	}})
	status, hdr, body := h.post("/embeddings", `{"model":"gpt-x","input":"hi"}`, nil)
	if status != 502 || hdr.Get("Location") != "" || gjson.GetBytes(body, "error.code").Str != "upstream_malformed" {
		t.Fatalf("%d %v %s", status, hdr, body)
	}
	req, _ := http.NewRequest(http.MethodGet, h.base+"/files/file-1/content", nil)
	req.Header.Set("If-None-Match", `"x"`)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("a 304 became %d", resp.StatusCode)
	}
}
