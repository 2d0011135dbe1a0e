package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// sendJSONHeader sends a request with Content-Type: application/json and
// the body given, empty or not, as openai-python does on every DELETE.
func sendJSONHeader(t *testing.T, method, url, key, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.WriteString(string(buf[:n]))
		if err != nil {
			break
		}
	}
	return resp.StatusCode, []byte(b.String())
}

// A pass-through request with Content-Type: application/json and an empty
// body has no body: a GET or DELETE of a natively served response, of its
// input items, of a file, and a POST that names no model (a cancel) reach
// the provider and get its answer. They used to be refused 400 "not valid
// JSON". A POST to an endpoint whose body must name a model keeps that 400.
func TestPassthroughEmptyJSONBodyIsNoBody(t *testing.T) {
	t.Parallel()
	up := &responsesAPI{}
	h := newOwnerHarness(t, up, "")
	id := createResponse(t, h.base, "sk-a", false)
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/responses/" + id, id},
		{"GET", "/responses/" + id + "/input_items", id + "/input_items"},
		{"POST", "/responses/" + id + "/cancel", id + "/cancel"},
		{"DELETE", "/responses/" + id, id},
		{"GET", "/files", "/v1/files"},
		{"DELETE", "/files/file-1", "/v1/files/file-1"},
	} {
		before := up.seen()
		status, body := sendJSONHeader(t, tc.method, h.base+tc.path, "sk-a", "")
		if status != 200 || gjson.GetBytes(body, "id").Str != tc.want {
			t.Fatalf("%s %s with an empty JSON body: %d %s, want 200 and the provider's answer", tc.method, tc.path, status, body)
		}
		if up.seen() != before+1 {
			t.Fatalf("%s %s: the provider got %d requests, want 1", tc.method, tc.path, up.seen()-before)
		}
		up.mu.Lock()
		got := up.calls[len(up.calls)-1]
		up.mu.Unlock()
		if want := tc.method + " /v1" + tc.path + " "; got != want {
			t.Fatalf("%s %s: the provider got %q, want %q", tc.method, tc.path, got, want)
		}
	}
	// Another tenant's response is still not reached by a bodiless DELETE.
	if status, body := sendJSONHeader(t, "DELETE", h.base+"/responses/"+id, "sk-b", ""); status != 404 {
		t.Fatalf("tenant b deletes a's response: %d %s, want 404", status, body)
	}
	for _, path := range []string{"/responses", "/embeddings", "/responses/input_tokens"} {
		before := up.seen()
		status, body := sendJSONHeader(t, "POST", h.base+path, "sk-a", "")
		if status != 400 || !strings.Contains(gjson.GetBytes(body, "error.message").Str, "not valid JSON") {
			t.Fatalf("POST %s with an empty JSON body: %d %s, want 400 not valid JSON", path, status, body)
		}
		if up.seen() != before {
			t.Fatalf("POST %s with an empty JSON body reached the provider", path)
		}
	}
}
