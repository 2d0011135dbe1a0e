package openapi

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/observe"
)

// doc30 is an OpenAPI 3.0 document in its own dialect: a server URL with
// variables, nullable schemas (typed, an enum, a $ref under allOf) and
// boolean exclusive bounds.
const doc30 = `openapi: 3.0.3
info: {title: t, version: "1"}
servers:
  - url: http://{host}:{port}/{basePath}
    variables:
      host: {default: api.test}
      port: {default: "8443", enum: ["8443", "9000"]}
      basePath: {default: base/v1}
components:
  schemas:
    Owner:
      type: object
      required: [id]
      properties: {id: {type: integer}}
paths:
  /items:
    post:
      operationId: createItem
      requestBody:
        required: true
        content:
          application/json:
            schema:
              type: object
              required: [name]
              properties:
                name: {type: string}
                note: {type: string, nullable: true}
                color: {type: string, enum: [red, blue], nullable: true}
                owner:
                  nullable: true
                  allOf: [{$ref: '#/components/schemas/Owner'}]
                size: {type: number, minimum: 0, exclusiveMinimum: true, maximum: 10, exclusiveMaximum: false}
                tags: {type: array, items: {type: string, nullable: true}}
`

// An OpenAPI 3.0 document is read in its own dialect: the server URL's
// variables take their defaults, a nullable schema takes null (and only
// it: a nullable string still refuses a number), and a boolean exclusive
// bound is the bound. Read as JSON Schema, a null the spec allows was
// refused (the model told to fix a valid call), and the server URL named
// "{basePath}".
func TestParse30Dialect(t *testing.T) {
	t.Parallel()
	ops, err := Parse([]byte(doc30), config.OpenAPI{Name: "t"}, http.DefaultClient)
	if err != nil || len(ops) != 1 {
		t.Fatalf("ops %v, err %v", ops, err)
	}
	op := ops[0]
	if got := op.base.String(); got != "http://api.test:8443/base/v1" {
		t.Fatalf("base %s", got)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(op.Tool.Parameters))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("tool.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("tool.json")
	if err != nil {
		t.Fatalf("%v\n%s", err, op.Tool.Parameters)
	}
	for args, ok := range map[string]bool{
		`{"body":{"name":"n","note":null,"color":null,"owner":null,"tags":["a",null]}}`: true,
		`{"body":{"name":"n","note":"x","color":"red","owner":{"id":1},"size":10}}`:     true,
		`{"body":{"name":"n","note":5}}`:                                                false,
		`{"body":{"name":"n","color":"green"}}`:                                         false,
		`{"body":{"name":"n","owner":{}}}`:                                              false,
		`{"body":{"name":"n","size":0}}`:                                                false, // exclusive minimum 0
		`{"body":{"name":null}}`:                                                        false, // not nullable
		`{"body":{"name":"n","tags":[null,1]}}`:                                         false,
		`{"body":{"name":"n","size":0.5}}`:                                              true,
	} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(v); (err == nil) != ok {
			t.Errorf("%s: valid %v, want %v (%v)\n%s", args, err == nil, ok, err, op.Tool.Parameters)
		}
	}
	if strings.Contains(op.Tool.Parameters, "nullable") {
		t.Errorf("the offered schema keeps nullable: %s", op.Tool.Parameters)
	}
}

// A 3.1 document's schemas are JSON Schema already: a "nullable" member
// there is no keyword, and is left alone.
func TestParse31KeepsItsSchemas(t *testing.T) {
	t.Parallel()
	doc := strings.Replace(doc30, "openapi: 3.0.3", "openapi: 3.1.0", 1)
	ops, err := Parse([]byte(doc), config.OpenAPI{Name: "t"}, http.DefaultClient)
	if err != nil || len(ops) != 1 {
		t.Fatalf("ops %v, err %v", ops, err)
	}
	if !strings.Contains(ops[0].Tool.Parameters, `"nullable":true`) {
		t.Fatalf("a 3.1 schema was translated: %s", ops[0].Tool.Parameters)
	}
}

// A non-2xx answer is quoted up to errorBody bytes, with the configured
// secrets masked before the cut: a secret the cut would split is masked
// whole, not shown in part.
func TestErrorBodyMasksBeforeTheCut(t *testing.T) {
	t.Parallel()
	const secret = "s3cr+t/K3y=zzQ9"
	observe.Secrets.Add(secret)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(strings.Repeat("x", errorBody-8) + " key=" + secret))
	}))
	defer srv.Close()
	ops := byName(parseFile(t, "petstore.yaml", config.OpenAPI{Name: "pets", BaseURL: srv.URL}))
	data, isErr, err := ops["getPetById"].Call(context.Background(), []byte(`{"petId":7}`))
	if err != nil || !isErr {
		t.Fatalf("err %v, isError %v", err, isErr)
	}
	if bytes.Contains(data, []byte(secret[:3])) {
		t.Fatalf("part of the secret shown: %q", data[max(0, len(data)-40):])
	}
}
