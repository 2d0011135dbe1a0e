package gateway

import (
	"net"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// A stored-responses store that cannot be reached answers what needs it
// (a stored response's GET, a previous_response_id) with a 503 to retry,
// coded store_unavailable, with retry-after: not a 404 (which tells an SDK
// to drop the id it holds) and not a bare internal_error.
func TestStoredResponsesStoreDown(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there: every Redis call fails
	h := newHarness(t, baseConfig+"\n[responses]\nstore = \"redis\"\n[redis]\naddr = \""+addr+"\"\ntimeout = \"200ms\"\n",
		mockllm.Options{Respond: responsesModel})
	for name, req := range map[string][2]string{
		"get":                  {"GET", ""},
		"previous_response_id": {"POST", `{"model":"gpt-x","input":"and then?","previous_response_id":"resp_0123456789abcdef"}`},
	} {
		url := h.base + "/responses"
		if req[0] == "GET" {
			url += "/resp_0123456789abcdef"
		}
		status, hdr, body := send(t, req[0], url, "", req[1])
		if status != 503 || gjson.GetBytes(body, "error.code").String() != "store_unavailable" || hdr.Get("Retry-After") == "" {
			t.Errorf("%s with the store down: %d retry-after %q %s, want 503 store_unavailable with retry-after", name, status, hdr.Get("Retry-After"), body)
		}
	}
}
