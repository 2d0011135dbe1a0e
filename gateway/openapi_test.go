package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/mockllm"
	"github.com/llmgw/gateway/wiretest"
)

// petServer implements a few Petstore operations and records the raw
// request lines it gets.
type petServer struct {
	mu   sync.Mutex
	seen []string
}

func (p *petServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.seen = append(p.seen, r.Method+" "+r.URL.RequestURI()+" key="+r.Header.Get("X-Api-Key")+" body="+string(body))
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == "GET" && r.URL.EscapedPath() == "/api/v3/pet/7":
		_, _ = w.Write([]byte(`{"id":7,"name":"doggie","status":"available"}`))
	case r.Method == "GET" && r.URL.Path == "/api/v3/pet/findByStatus":
		_, _ = w.Write([]byte(`[{"id":1,"name":"a","status":"` + strings.Join(r.URL.Query()["status"], "+") + `"}]`))
	case r.Method == "POST" && r.URL.Path == "/api/v3/pet":
		_, _ = w.Write([]byte(`{"id":99,"created":` + string(body) + `}`))
	case r.URL.Path == "/api/v3/store/inventory":
		w.WriteHeader(500)
		_, _ = w.Write([]byte(`{"message":"inventory exploded"}`))
	default:
		w.WriteHeader(404)
		_, _ = w.Write([]byte(`{"message":"Pet not found"}`))
	}
}

// TestOpenAPIPetstoreTools: the Petstore's operations are offered as server
// tools; calls map onto path, query and body, answers come back as JSON,
// 404 and 500 as error results, and hostile arguments stay inside their
// operation.
func TestOpenAPIPetstoreTools(t *testing.T) {
	t.Parallel()
	pets := &petServer{}
	srv := httptest.NewServer(pets)
	t.Cleanup(srv.Close)
	spec, _ := filepath.Abs("../openapi/testdata/petstore.yaml")
	cfg := baseConfig + `
[[openapi]]
name = "pets"
spec = "` + spec + `"
base_url = "` + srv.URL + `/api/v3"
prefix = "pets_"
headers = { X-Api-Key = "pet-key" }
operations = ["*Pet*", "getInventory", "getUserByName"]
`
	calls := map[string][2]string{
		"get":       {"pets_getPetById", `{"petId":7}`},
		"missing":   {"pets_getPetById", `{"petId":8}`},
		"find":      {"pets_findPetsByStatus", `{"status":["sold","pending"]}`},
		"add":       {"pets_addPet", `{"body":{"name":"Rex ✓","photoUrls":[]}}`},
		"inventory": {"pets_getInventory", `{}`},
		"traverse":  {"pets_getUserByName", `{"username":"../../store/inventory"}`},
		"not int":   {"pets_getPetById", `{"petId":"../../store/inventory"}`},
		"crlf":      {"pets_deletePet", `{"petId":1,"api_key":"k\r\nX-Admin: yes"}`},
	}
	h := newHarness(t, cfg, mockllm.Options{Respond: func(c *mockllm.Call) mockllm.Turn {
		if c.LastRole == "tool" {
			return mockllm.Turn{Text: "result: " + strings.Join(c.ToolResults, "")}
		}
		call := calls[c.LastText]
		return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: call[0], Arguments: call[1]}}}
	}})
	schema := wiretest.LoadSchema(t)
	ask := func(what string) string {
		t.Helper()
		acc, _, err := h.streamChat(userMsg(what), wiretest.Options{}, schema)
		if err != nil {
			t.Fatal(err)
		}
		return acc.Choices[0].Message.Content
	}
	for _, tc := range []struct{ ask, want, seen string }{
		{"get", `"status":"ok","data":{"id":7,"name":"doggie"`, "GET /api/v3/pet/7 key=pet-key body="},
		{"missing", `HTTP 404: {\"message\":\"Pet not found\"}`, "GET /api/v3/pet/8 "},
		{"find", `"status":"sold+pending"`, "GET /api/v3/pet/findByStatus?status=sold&status=pending "},
		{"add", `"created":{"name":"Rex ✓","photoUrls":[]}`, `POST /api/v3/pet key=pet-key body={"name":"Rex ✓","photoUrls":[]}`},
		{"inventory", `HTTP 500: {\"message\":\"inventory exploded\"}`, "GET /api/v3/store/inventory "},
		{"traverse", `HTTP 404`, "GET /api/v3/user/..%2F..%2Fstore%2Finventory "},
		{"not int", `"type":"invalid_arguments"`, ""},
		{"crlf", `may not hold control characters`, ""},
	} {
		pets.mu.Lock()
		pets.seen = nil
		pets.mu.Unlock()
		got := ask(tc.ask)
		if !strings.Contains(got, tc.want) {
			t.Errorf("%s: answer %q, want %q", tc.ask, got, tc.want)
		}
		pets.mu.Lock()
		seen := strings.Join(pets.seen, "\n")
		pets.mu.Unlock()
		if tc.seen == "" && seen != "" || !strings.Contains(seen, tc.seen) {
			t.Errorf("%s: the server saw %q, want %q", tc.ask, seen, tc.seen)
		}
	}
	tools := gjson.GetBytes(h.mock.Requests()[0].Body, "tools.#.function.name").Raw
	if tools != `["pets_addPet","pets_updatePet","pets_findPetsByStatus","pets_getPetById","pets_deletePet","pets_getInventory","pets_getUserByName"]` {
		t.Errorf("offered tools %s", tools)
	}
}

// TestOpenAPISpecErrorsAtStart: a spec that does not load fails Build with
// the spec's name, file and the problem.
func TestOpenAPISpecErrorsAtStart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ spec, want string }{
		{"/nonexistent/spec.yaml", `openapi[0] "bad" (/nonexistent/spec.yaml): open /nonexistent/spec.yaml: no such file or directory`},
		{"../openapi/load.go", `openapi[0] "bad" (../openapi/load.go): `},
	} {
		cfg, err := config.Parse([]byte("[[providers]]\nname = \"p\"\nkind = \"mock\"\n[[models]]\nname = \"m\"\nprovider = \"p\"\n[[openapi]]\nname = \"bad\"\nspec = \"" + tc.spec + "\"\nbase_url = \"http://x.test\"\n"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Build(cfg, zerolog.Nop())
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.spec, err)
		}
	}
}
