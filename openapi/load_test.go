package openapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
)

func parseFile(t testing.TB, file string, s config.OpenAPI) []*Operation {
	t.Helper()
	doc, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := Parse(doc, s, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

func byName(ops []*Operation) map[string]*Operation {
	m := map[string]*Operation{}
	for _, o := range ops {
		m[o.Tool.Name] = o
	}
	return m
}

func TestParsePetstore(t *testing.T) {
	t.Parallel()
	ops := byName(parseFile(t, "petstore.yaml", config.OpenAPI{Name: "pets", Prefix: "pets_", Operations: []string{"*Pet*", "getInventory"}, Approval: []string{"deletePet"}}))
	if len(ops) != 6 || ops["pets_loginUser"] != nil {
		t.Fatalf("tools %v", ops)
	}
	add := ops["pets_addPet"]
	if add.Tool.Description != "Add a new pet to the store" || add.method != "POST" || add.base.Host != "petstore.example.com" {
		t.Errorf("addPet %+v", add.Tool)
	}
	params := gjson.Parse(add.Tool.Parameters)
	if params.Get("required").Raw != `["body"]` || params.Get("properties.body.properties.category.properties.name.type").Str != "string" ||
		params.Get("properties.body.properties.status.enum.2").Str != "sold" || strings.Contains(add.Tool.Parameters, "$ref") {
		t.Errorf("addPet parameters %s", add.Tool.Parameters)
	}
	get := gjson.Parse(ops["pets_getPetById"].Tool.Parameters)
	if get.Get("properties.petId.type").Str != "integer" || get.Get("properties.petId.description").Str != "ID of the pet" || get.Get("required").Raw != `["petId"]` {
		t.Errorf("getPetById parameters %s", get.Raw)
	}
	if ops["pets_deletePet"].Tool.Approval != "always" || ops["pets_getPetById"].Tool.Approval != "" {
		t.Error("approval globs")
	}
	// A safe method's operation is repeatable (an answer it took part in
	// may be cached), a POST or DELETE one is not.
	if !ops["pets_getPetById"].Tool.Repeatable || add.Tool.Repeatable || ops["pets_deletePet"].Tool.Repeatable {
		t.Error("repeatable: GET yes, POST and DELETE no")
	}
	find := gjson.Parse(ops["pets_findPetsByStatus"].Tool.Parameters)
	if find.Get("properties.status.items.enum.0").Str != "available" {
		t.Errorf("findPetsByStatus %s", find.Raw)
	}
}

func TestParse31JSON(t *testing.T) {
	t.Parallel()
	ops := byName(parseFile(t, "notes31.json", config.OpenAPI{Name: "notes", BaseURL: "http://notes.local/v1"}))
	if ops["get_note"] == nil || ops["create_note"] == nil {
		t.Fatalf("tools %v", ops)
	}
	if p := gjson.Parse(ops["create_note"].Tool.Parameters); p.Get("properties.body.properties.tags.items.type").Str != "string" {
		t.Errorf("create_note %s", p.Raw)
	}
}

func TestParseErrorsSayWhat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc, want string }{
		{"swagger 2", `{"swagger":"2.0","info":{"title":"x","version":"1"},"paths":{}}`, "not an OpenAPI 3.0 or 3.1 document"},
		{"no server", `{"openapi":"3.0.0","info":{"title":"x","version":"1"},"paths":{"/a":{"get":{"responses":{"200":{"description":"ok"}}}}}}`, "base_url is required"},
		{"garbage", `{{{`, ""},
		{"body ref missing", `{"openapi":"3.0.0","info":{"title":"x","version":"1"},"servers":[{"url":"http://a.b"}],"paths":{"/a":{"post":{"operationId":"op","requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/Nope"}}}},"responses":{"200":{"description":"ok"}}}}}}`, "#/components/schemas/Nope"},
		{"body schema invalid", `{"openapi":"3.0.0","info":{"title":"x","version":"1"},"servers":[{"url":"http://a.b"}],"paths":{"/a":{"post":{"operationId":"op","requestBody":{"content":{"application/json":{"schema":{"type":"bogus"}}}},"responses":{"200":{"description":"ok"}}}}}}`, `operation "op": parameters`},
		{"parameter ref missing", `{"openapi":"3.0.0","info":{"title":"x","version":"1"},"servers":[{"url":"http://a.b"}],"paths":{"/a/{id}":{"get":{"operationId":"op","parameters":[{"$ref":"#/components/parameters/Id"}],"responses":{"200":{"description":"ok"}}}}}}`, "#/components/parameters/Id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), config.OpenAPI{Name: "x"}, http.DefaultClient)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// TestHostileArgumentsStayInside: path traversal stays one escaped path
// segment, CRLF in a header is refused, and the URL is always base_url's.
func TestHostileArgumentsStayInside(t *testing.T) {
	t.Parallel()
	ops := byName(parseFile(t, "petstore.yaml", config.OpenAPI{Name: "pets", BaseURL: "https://pets.test/api/v3/"}))
	for _, tc := range []struct {
		name, op, args, url, err string
	}{
		{"plain", "getPetById", `{"petId":7}`, "https://pets.test/api/v3/pet/7", ""},
		{"traversal", "getPetById", `{"petId":"../../admin?x=1#f"}`, "https://pets.test/api/v3/pet/..%2F..%2Fadmin%3Fx=1%23f", ""},
		{"dot dot", "getPetById", `{"petId":".."}`, "", "may not be empty"},
		{"absolute url", "getPetById", `{"petId":"http://evil.test/x"}`, "https://pets.test/api/v3/pet/http:%2F%2Fevil.test%2Fx", ""},
		{"missing path", "getPetById", `{}`, "", "required"},
		{"query array", "findPetsByStatus", `{"status":["sold","pending"]}`, "https://pets.test/api/v3/pet/findByStatus?status=sold&status=pending", ""},
		{"crlf header", "deletePet", `{"petId":1,"api_key":"k\r\nX-Admin: 1"}`, "", "control characters"},
		{"not an object", "getPetById", `[1]`, "", "JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := ops[tc.op].request(context.Background(), []byte(tc.args))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || req.URL.String() != tc.url {
				t.Fatalf("url %v (%v), want %s", req, err, tc.url)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, file := range []string{"petstore.yaml", "notes31.json"} {
		b, _ := os.ReadFile("testdata/" + file)
		f.Add(b)
	}
	f.Add([]byte("openapi: 3.1.0\npaths:\n  /a/{b}:\n    get: {parameters: [{name: b, in: path, schema: {$ref: '#/x'}}]}\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		if len(doc) > 64<<10 {
			return
		}
		ops, err := Parse(doc, config.OpenAPI{Name: "f", BaseURL: "http://h.test/"}, http.DefaultClient)
		if err != nil {
			return
		}
		for _, o := range ops {
			if !gjson.Valid(o.Tool.Parameters) || len(o.Tool.Name) == 0 || len(o.Tool.Name) > 64 {
				t.Fatalf("tool %+v", o.Tool)
			}
		}
	})
}

func FuzzRequest(f *testing.F) {
	f.Add(`{"petId":"a/b","api_key":"x"}`)
	f.Add(`{"status":["a",1,{"x":2}],"body":{"name":"n"}}`)
	doc, _ := os.ReadFile("testdata/petstore.yaml")
	ops, err := Parse(doc, config.OpenAPI{Name: "pets", BaseURL: "https://pets.test/api/"}, http.DefaultClient)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, args string) {
		for _, o := range ops {
			req, err := o.request(context.Background(), []byte(args))
			if err != nil {
				continue
			}
			if req.URL.Host != "pets.test" || req.URL.Scheme != "https" || !strings.HasPrefix(req.URL.EscapedPath(), "/api/") {
				t.Fatalf("left base_url: %s", req.URL)
			}
			for _, vs := range req.Header {
				for _, v := range vs {
					if strings.ContainsAny(v, "\r\n") {
						t.Fatalf("header with a line break: %q", v)
					}
				}
			}
		}
	})
}

// TestArgumentKeysAreLiteral: a parameter's name from a spec is read from the
// arguments as a literal key, never as a gjson path: "@reverse" is not the
// modifier (which would yield the whole arguments object) and "a.b" is not
// the nested member b of a.
func TestArgumentKeysAreLiteral(t *testing.T) {
	t.Parallel()
	op := listItems(t, "https://h.test/", `
        - {name: "@reverse", in: query, schema: {type: string}}
        - {name: "a.b", in: query, schema: {type: string}}`)
	for _, tc := range []struct{ name, args, query string }{
		{"literal keys", `{"@reverse":"r","a.b":"d","a":{"b":"nested"}}`, "%40reverse=r&a.b=d"},
		{"modifier and path inert", `{"a":{"b":"nested"},"x":[1,2]}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := op.request(context.Background(), []byte(tc.args))
			if err != nil {
				t.Fatal(err)
			}
			if req.URL.RawQuery != tc.query {
				t.Fatalf("query %q, want %q", req.URL.RawQuery, tc.query)
			}
		})
	}
}

// base_url's query is kept, and the model cannot replace it; an object
// query parameter is exploded into its properties, OpenAPI's default style.
func TestQueryKeepsBaseAndExplodesObjects(t *testing.T) {
	t.Parallel()
	op := listItems(t, "https://h.test/api?code=FUNCKEY", `
        - {name: tag, in: query, schema: {type: string}}
        - {name: code, in: query, schema: {type: string}}
        - {name: filter, in: query, schema: {type: object}}
        - {name: deep, in: query, style: deepObject, schema: {type: object}}
        - {name: packed, in: query, explode: false, schema: {type: object}}
        - {name: "ids[]", in: query, schema: {type: array, items: {type: string}}}`)
	req, err := op.request(context.Background(), []byte(`{"tag":"a","code":"mine","filter":{"x":"1","y":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := req.URL.RawQuery; got != "code=FUNCKEY&tag=a&x=1&y=2" || req.URL.Path != "/api/items" {
		t.Fatalf("URL %s", req.URL)
	}
	// Another declared style is not exploded: the object goes whole.
	req, err = op.request(context.Background(), []byte(`{"deep":{"x":"1"},"packed":{"y":"2"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := req.URL.Query(); got.Get("deep") != `{"x":"1"}` || got.Get("packed") != `{"y":"2"}` || got.Has("x") || got.Has("y") {
		t.Fatalf("URL %s", req.URL)
	}
	// An exploded property may not set another declared parameter around
	// its schema, alone or beside it.
	for _, args := range []string{`{"filter":{"tag":"admin"}}`, `{"tag":"a","filter":{"tag":"admin"}}`, `{"filter":{"x":"1","deep":"{}"}}`, `{"filter":{"Tag":"admin"}}`, `{"filter":{"tag[]":"admin"}}`, `{"filter":{"ids":"1"}}`, `{"filter":{"ids[]":"1"}}`} {
		if req, err := op.request(context.Background(), []byte(args)); err == nil {
			t.Errorf("%s: sent %s", args, req.URL)
		}
	}
}

// TestParseRecursiveSchema: a schema that refers to itself is cut where it
// recurses, so the tool's parameters are a schema of their own that
// compiles (a $ref left in it would point nowhere, and the loop would drop
// the tool).
func TestParseRecursiveSchema(t *testing.T) {
	t.Parallel()
	doc := `{"openapi":"3.0.0","info":{"title":"x","version":"1"},"servers":[{"url":"http://a.b"}],
"components":{"schemas":{"Node":{"type":"object","properties":{"name":{"type":"string"},"next":{"$ref":"#/components/schemas/Node"}}}}},
"paths":{"/a":{"post":{"operationId":"op","requestBody":{"content":{"application/json":{"schema":{"$ref":"#/components/schemas/Node"}}}},"responses":{"200":{"description":"ok"}}}}}}`
	ops, err := Parse([]byte(doc), config.OpenAPI{Name: "x"}, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	params := ops[0].Tool.Parameters
	if strings.Contains(params, "$ref") || gjson.Get(params, "properties.body.properties.name.type").Str != "string" {
		t.Fatalf("parameters %s", params)
	}
	s, err := jsonschema.UnmarshalJSON(strings.NewReader(params))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tool.json", s); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compile("tool.json"); err != nil {
		t.Fatalf("parameters %s do not compile: %v", params, err)
	}
}

// TestCallCutsAHugeAnswerVisibly: an answer over the read bound is a
// prefix that says so (the loop's own cap may cut it further), never a
// prefix passed off as the whole answer.
func TestCallCutsAHugeAnswerVisibly(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		// 9 bytes, then 2-byte runes: the read bound splits one.
		_, _ = w.Write([]byte(`{"item":"` + strings.Repeat("é", maxAnswer) + `"}`))
	}))
	defer srv.Close()
	ops := byName(parseFile(t, "petstore.yaml", config.OpenAPI{Name: "pets", BaseURL: srv.URL}))
	data, isErr, err := ops["getPetById"].Call(context.Background(), []byte(`{"petId":7}`))
	if err != nil || isErr {
		t.Fatalf("err %v, isError %v", err, isErr)
	}
	if !utf8.Valid(data) || len(data) > maxAnswer+100 || !strings.HasSuffix(string(data), "it is larger than 1048576 bytes]") ||
		strings.Contains(string(data), "\uFFFD") {
		t.Fatalf("%d bytes, ending %q", len(data), data[max(0, len(data)-80):])
	}
}

// A redirect loop on the API's host ends at its fifth redirect with that
// redirect as the answer, an error result naming its status, not as an
// unreachable server.
func TestRedirectLoopIsTheAnswer(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Path, http.StatusFound)
	}))
	defer srv.Close()
	resp, err := newClient().Get(srv.URL + "/loop")
	if err != nil {
		t.Fatalf("a redirect loop failed the call: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// listItems parses a spec of one operation, GET /items (listItems), with
// the given YAML parameter list, served at baseURL.
func listItems(t *testing.T, baseURL, params string) *Operation {
	t.Helper()
	doc := []byte(`openapi: 3.0.0
info: {title: t, version: "1"}
paths:
  /items:
    get:
      operationId: listItems
      parameters:` + params + "\n")
	ops, err := Parse(doc, config.OpenAPI{Name: "t", BaseURL: baseURL}, http.DefaultClient)
	if err != nil || len(ops) != 1 {
		t.Fatalf("ops %v, err %v", ops, err)
	}
	return ops[0]
}

// An operation's description over OpenAI's 1024 characters is cut at a
// character's start: cut at byte 1024, a two-byte character made the
// description invalid UTF-8.
func TestLongDescriptionCutWhole(t *testing.T) {
	t.Parallel()
	doc := `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"servers":[{"url":"http://x.local"}],"paths":{"/a":{"get":{"operationId":"op","summary":"S` +
		strings.Repeat("é", 2000) + `","responses":{"200":{"description":"ok"}}}}}}`
	ops, err := Parse([]byte(doc), config.OpenAPI{Name: "t"}, http.DefaultClient)
	if err != nil || len(ops) != 1 {
		t.Fatalf("%v %d", err, len(ops))
	}
	if d := ops[0].Tool.Description; len(d) > config.MaxToolDescription || !utf8.ValidString(d) || !strings.HasPrefix(d, "Sé") {
		t.Fatalf("description of %d bytes, valid UTF-8 %v", len(d), utf8.ValidString(d))
	}
}
