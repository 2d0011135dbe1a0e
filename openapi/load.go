// Package openapi turns the operations of OpenAPI 3.0 and 3.1 documents
// ([[openapi]]) into server tools: one tool per operation, its parameters
// one JSON Schema built from the path, query and header parameters and the
// JSON request body with every $ref inlined, and a call that maps the
// model's arguments onto that operation of base_url and nothing else.
//
// Documents are parsed with github.com/pb33f/libopenapi: it reads 3.0 and
// 3.1, JSON and YAML, and renders schemas with their references inlined
// (MarshalJSONInline), which a tool's parameters need.
package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/pb33f/libopenapi"
	"github.com/pb33f/libopenapi/datamodel"
	"github.com/pb33f/libopenapi/datamodel/high/base"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/llmgw/gateway/config"
)

// maxSpec bounds a spec document read from a file or a URL.
const maxSpec = 16 << 20

// readSpec reads the document at ref: an http(s) URL, or a file path
// relative to dir.
func readSpec(ctx context.Context, ref, dir string) ([]byte, error) {
	if strings.HasPrefix(ref, "http://") || strings.HasPrefix(ref, "https://") {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ref, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			return nil, fmt.Errorf("status %d", resp.StatusCode)
		}
		return readBounded(resp.Body)
	}
	if !filepath.IsAbs(ref) && dir != "" {
		ref = filepath.Join(dir, ref)
	}
	f, err := os.Open(ref)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readBounded(f)
}

func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxSpec+1))
	if err == nil && len(b) > maxSpec {
		err = fmt.Errorf("larger than %d bytes", maxSpec)
	}
	return b, err
}

// Parse builds the operations of one spec document. The errors say what
// is wrong with the document; the caller adds which one it is.
func Parse(doc []byte, s config.OpenAPI, client *http.Client) ([]*Operation, error) {
	d, err := libopenapi.NewDocumentWithConfiguration(doc, &datamodel.DocumentConfiguration{})
	if err != nil {
		return nil, err
	}
	if info := d.GetSpecInfo(); info == nil || !strings.HasPrefix(info.Version, "3.") {
		return nil, errors.New("not an OpenAPI 3.0 or 3.1 document")
	}
	m, err := d.BuildV3Model()
	if err != nil {
		// A model built with errors lacks what failed (a $ref that does
		// not resolve drops the parameter or body that used it): its
		// operations would call the service without them.
		return nil, err
	}
	model := &m.Model
	// OpenAPI 3.0's schemas are a dialect of JSON Schema: translated
	// (from30) before they are offered and compiled.
	v30 := strings.HasPrefix(d.GetSpecInfo().Version, "3.0")
	base := s.BaseURL
	if base == "" {
		for _, srv := range model.Servers {
			su := serverURL(srv)
			if u, err := url.Parse(su); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
				base = su
				break
			}
		}
		if base == "" {
			return nil, errors.New("base_url is required: the spec's servers name no absolute http(s) URL (with their variables' defaults)")
		}
	}
	bu, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("base_url: %w", err)
	}
	var ops []*Operation
	names := map[string]bool{}
	if model.Paths == nil || model.Paths.PathItems == nil {
		return nil, errors.New("the spec has no paths")
	}
	for p, item := range model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			id := op.OperationId
			if id == "" {
				id = method + "_" + p
			}
			if !selected(s.Operations, id) {
				continue
			}
			o, err := newOperation(s, bu, client, strings.ToUpper(method), p, id, item.Parameters, op, v30)
			if err != nil {
				return nil, fmt.Errorf("operation %q: %w", id, err)
			}
			for n := 2; names[o.Tool.Name]; n++ { // sanitising may collide
				o.Tool.Name = fmt.Sprintf("%s_%d", strings.TrimRight(o.Tool.Name[:min(len(o.Tool.Name), 60)], "_"), n)
			}
			names[o.Tool.Name] = true
			ops = append(ops, o)
		}
	}
	if len(ops) == 0 {
		return nil, errors.New("no operation matches operations")
	}
	return ops, nil
}

func selected(globs []string, id string) bool {
	if len(globs) == 0 {
		return true
	}
	return slices.ContainsFunc(globs, func(g string) bool { ok, _ := path.Match(g, id); return ok })
}

var unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// toolName sanitises an operationId to the providers' name rules
// ([a-zA-Z0-9_-]{1,64}), after prefix.
func toolName(prefix, id string) string {
	n := prefix + strings.Trim(unsafeName.ReplaceAllString(id, "_"), "_")
	if len(n) > 64 {
		n = n[:64]
	}
	if n == "" {
		n = "operation"
	}
	return n
}

// newOperation builds one operation's tool: its parameters schema and how
// its arguments map onto the request.
func newOperation(s config.OpenAPI, bu *url.URL, client *http.Client, method, p, id string, shared []*v3.Parameter, op *v3.Operation, v30 bool) (*Operation, error) {
	o := &Operation{method: method, path: p, base: bu, headers: s.Headers, client: client}
	props := map[string]json.RawMessage{}
	var required []string
	params := append(append([]*v3.Parameter(nil), shared...), op.Parameters...)
	for _, prm := range params {
		if prm == nil || prm.Name == "" || prm.In == "cookie" {
			continue
		}
		if prm.In != "path" && prm.In != "query" && prm.In != "header" {
			continue
		}
		schema, err := inline(prm.Schema, prm.Description, v30)
		if err != nil {
			return nil, fmt.Errorf("parameter %q: %w", prm.Name, err)
		}
		// An operation's parameter replaces a shared one of the same name
		// and place; another place's parameter of the same name gets its
		// place as a prefix.
		key := prm.Name
		if i := slices.IndexFunc(o.params, func(q param) bool { return q.name == prm.Name && q.in == prm.In }); i >= 0 {
			key = o.params[i].key
		} else {
			if _, dup := props[key]; dup || key == bodyKey {
				key = prm.In + "_" + prm.Name
			}
			form := prm.Style == "" || prm.Style == "form"
			o.params = append(o.params, param{key: key, name: prm.Name, in: prm.In,
				explode: form && (prm.Explode == nil || *prm.Explode),
				joined:  form && prm.Explode != nil && !*prm.Explode})
		}
		props[key] = schema
		if prm.In == "path" || prm.Required != nil && *prm.Required {
			required = append(required, key)
		}
	}
	if rb := op.RequestBody; rb != nil && rb.Content != nil {
		for mt, media := range rb.Content.FromOldest() {
			if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
				continue
			}
			schema, err := inline(media.Schema, rb.Description, v30)
			if err != nil {
				return nil, fmt.Errorf("request body: %w", err)
			}
			o.body, o.bodyType = true, mt
			props[bodyKey] = schema
			if rb.Required != nil && *rb.Required {
				required = append(required, bodyKey)
			}
			break
		}
	}
	schema, err := json.Marshal(struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required,omitempty"`
	}{"object", props, slices.Compact(required)})
	if err != nil {
		return nil, err
	}
	if err := compiles(schema); err != nil {
		return nil, fmt.Errorf("parameters: %w", err)
	}
	desc := strings.TrimSpace(op.Summary + "\n\n" + op.Description)
	if desc == "" {
		desc = method + " " + p
	}
	desc = config.ClipDescription(desc)
	approval := ""
	if len(s.Approval) > 0 && selected(s.Approval, id) {
		approval = "always"
	}
	o.Tool = config.Tool{Name: toolName(s.Prefix, id), Description: desc, Parameters: string(schema),
		Kind: "openapi", Server: s.Name, Timeout: s.Timeout, Models: s.Models, Approval: approval,
		// A safe method changes nothing: an answer it took part in may be
		// served again, as one of an MCP tool that only reads.
		Repeatable: method == http.MethodGet || method == http.MethodHead}
	return o, nil
}

// bodyKey is the argument that holds the JSON request body.
const bodyKey = "body"

// serverURL is srv's URL with each {variable} replaced by its default.
func serverURL(srv *v3.Server) string {
	u := srv.URL
	if srv.Variables == nil || !strings.Contains(u, "{") {
		return u
	}
	for name, v := range srv.Variables.FromOldest() {
		if v != nil {
			u = strings.ReplaceAll(u, "{"+name+"}", v.Default)
		}
	}
	return u
}

// inline returns a schema as JSON with every $ref inlined; a missing
// schema is any value. A recursive schema is cut where it recurses. An
// OpenAPI 3.0 document's schema (v30) is translated to JSON Schema
// (from30).
func inline(sp *base.SchemaProxy, desc string, v30 bool) (json.RawMessage, error) {
	out := json.RawMessage(`{}`)
	if sp != nil {
		s := sp.Schema()
		if s == nil {
			if err := sp.GetBuildError(); err != nil {
				return nil, err
			}
			return nil, errors.New("the schema does not resolve")
		}
		b, err := s.MarshalJSONInline()
		if err != nil {
			return nil, err
		}
		if out, err = cutRefs(b); err != nil {
			return nil, err
		}
		if v30 {
			if out, err = from30(out); err != nil {
				return nil, err
			}
		}
	}
	if desc == "" {
		return out, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(out, &m) != nil || m == nil {
		return out, nil
	}
	if _, ok := m["description"]; !ok {
		d, _ := json.Marshal(desc)
		m["description"] = d
	}
	return json.Marshal(m)
}

// cutRefs replaces every schema that is still a $ref in b (where a
// recursive schema recurses: MarshalJSONInline leaves the reference) by
// {}, any value. The tool's schema is a document of its own, in which
// such a reference points nowhere and would not compile.
func cutRefs(b []byte) (json.RawMessage, error) {
	if !bytes.Contains(b, []byte(`"$ref"`)) {
		return b, nil
	}
	return rewrite(b, cutRef)
}

// rewrite decodes the JSON b (numbers kept as written), applies f and
// encodes the result.
func rewrite(b []byte, f func(any) any) (json.RawMessage, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(f(v))
}

func cutRef(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["$ref"].(string); ok {
			return map[string]any{}
		}
		for k, e := range x {
			x[k] = cutRef(e)
		}
	case []any:
		for i, e := range x {
			x[i] = cutRef(e)
		}
	}
	return v
}

// from30 translates an OpenAPI 3.0 schema into the JSON Schema a tool's
// parameters are (3.1's schemas are JSON Schema already): "nullable": true
// becomes null among its types (and in its enum, which would refuse it
// otherwise), or an anyOf with null for a schema without a type; a
// boolean exclusiveMinimum or exclusiveMaximum becomes the bound itself.
// Without it a null the spec allows is refused, and a boolean bound does
// not compile.
func from30(b []byte) (json.RawMessage, error) {
	if !bytes.Contains(b, []byte(`"nullable"`)) && !bytes.Contains(b, []byte(`"exclusiveM`)) {
		return b, nil
	}
	return rewrite(b, schema30)
}

// schema30 translates one 3.0 schema and the schemas inside it.
func schema30(v any) any {
	s, ok := v.(map[string]any)
	if !ok {
		return v
	}
	for _, k := range [...]string{"items", "not", "additionalProperties"} {
		if e, ok := s[k]; ok {
			s[k] = schema30(e)
		}
	}
	for _, k := range [...]string{"allOf", "anyOf", "oneOf"} {
		if list, ok := s[k].([]any); ok {
			for i, e := range list {
				list[i] = schema30(e)
			}
		}
	}
	if props, ok := s["properties"].(map[string]any); ok {
		for k, e := range props {
			props[k] = schema30(e)
		}
	}
	for _, b := range [...][2]string{{"exclusiveMinimum", "minimum"}, {"exclusiveMaximum", "maximum"}} {
		if x, ok := s[b[0]].(bool); ok {
			delete(s, b[0])
			if bound, has := s[b[1]]; x && has {
				s[b[0]] = bound
				delete(s, b[1])
			}
		}
	}
	nullable, _ := s["nullable"].(bool)
	delete(s, "nullable")
	if !nullable {
		return s
	}
	if enum, ok := s["enum"].([]any); ok && !slices.Contains(enum, any(nil)) {
		s["enum"] = append(enum, nil)
	}
	switch t := s["type"].(type) {
	case string:
		s["type"] = []any{t, "null"}
		return s
	case []any:
		if !slices.Contains(t, any("null")) {
			s["type"] = append(t, "null")
		}
		return s
	}
	if _, ok := s["enum"]; ok {
		return s
	}
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}

// compiles reports why schema is not a JSON Schema the tool loop can
// compile (it compiles every tool's parameters, and drops a tool whose
// do not), or nil. Only the document itself is read, never a $ref's.
func compiles(schema []byte) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource("tool.json", doc); err != nil {
		return err
	}
	_, err = c.Compile("tool.json")
	return err
}
