package openapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/observe"
)

// An answer cut at the read bound in the middle of a configured secret
// shows no start of it: the masking finds only whole secrets, so the cut
// goes before it. The same for an error answer whose masked start is
// quoted (a long secret, masked short, brings the cut into the quote).
func TestOpenAPICutKeepsNoSecretStart(t *testing.T) {
	t.Parallel()
	short := "HDRSECRET-Zq+/=&x-probe"
	long := "LONGSECRET-probe-" + strings.Repeat("ab", 100_000)
	observe.Secrets.Add(short, long)
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{
		{"2xx", 200, strings.Repeat("z", maxAnswer-8) + short + "tail"},
		{"error", 500, strings.Repeat(long, maxAnswer/len(long)+2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(tc.status)
				_, _ = w.Write([]byte(tc.body))
			}))
			defer srv.Close()
			ops := byName(parseFile(t, "petstore.yaml", config.OpenAPI{Name: "pets", BaseURL: srv.URL}))
			data, isErr, err := ops["getPetById"].Call(context.Background(), []byte(`{"petId":7}`))
			if err != nil || isErr != (tc.status != 200) {
				t.Fatalf("err %v, isError %v", err, isErr)
			}
			// What the loop shows: masked (okContent, errContent).
			data = observe.Secrets.RedactEscaped(data)
			if bytes.Contains(data, []byte(short[:3])) || bytes.Contains(data, []byte(long[:4])) {
				t.Fatalf("part of a secret shown: %q", data[max(0, len(data)-80):])
			}
		})
	}
}

// An array query parameter declaring explode: false is one key with its
// values comma-separated, each escaped (OpenAPI's form style); an object
// one is its JSON, an exploded array repeated keys, and base_url's own
// key wins over either.
func TestOpenAPIQueryStyles(t *testing.T) {
	t.Parallel()
	const doc = `openapi: 3.0.3
info: {title: t, version: "1"}
paths:
  /items:
    get:
      operationId: list
      parameters:
        - {name: arr, in: query, explode: false, schema: {type: array, items: {type: string}}}
        - {name: rep, in: query, schema: {type: array, items: {type: string}}}
        - {name: obj, in: query, explode: false, schema: {type: object}}
        - {name: v, in: query, explode: false, schema: {type: array, items: {type: string}}}
`
	ops, err := Parse([]byte(doc), config.OpenAPI{Name: "t", BaseURL: "http://api.example/v1?v=1"}, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, args, want string }{
		{"joined", `{"arr":["x","y,z","a&b"]}`, "v=1&arr=x,y%2Cz,a%26b"},
		{"one value", `{"arr":["x"]}`, "v=1&arr=x"},
		{"empty", `{"arr":[]}`, "v=1"},
		{"exploded", `{"rep":["a","b"]}`, "rep=a&rep=b&v=1"},
		{"object", `{"obj":{"k":"v"}}`, "obj=%7B%22k%22%3A%22v%22%7D&v=1"},
		{"base_url wins", `{"v":["2","3"]}`, "v=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := ops[0].request(context.Background(), []byte(tc.args))
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.RawQuery != tc.want {
				t.Fatalf("query %q, want %q", req.URL.RawQuery, tc.want)
			}
		})
	}
}
