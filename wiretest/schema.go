package wiretest

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// SchemaEnv names the environment variable that may point at
// chat-schemas.json, overriding the copy embedded in this package.
const SchemaEnv = "GATEWAY_OPENAPI_SCHEMAS"

// schemaID is the resource id chat-schemas.json declares.
const schemaID = "urn:openai-chat"

// Schema validates JSON documents against the normalized OpenAI chat schemas
// (openapi/chat-schemas.json, JSON Schema 2020-12). Each named
// schema is compiled once, on first use. A Schema is safe for concurrent use;
// validation only reads the bytes it is given.
type Schema struct {
	path string
	id   string // the resource id the document declares

	mu   sync.Mutex // guards comp and defs
	comp *jsonschema.Compiler
	defs map[string]*compiled
}

type compiled struct {
	once sync.Once
	sch  *jsonschema.Schema
	err  error
}

// loaded caches one *Schema per file path for the whole test binary.
var loaded sync.Map

// embedded is the repository's copy of the chat schemas (openapi/).
//
//go:embed openapi/chat-schemas.json
var embedded []byte

// embeddedResponses is the repository's copy of the Responses API schemas
// (openapi/responses-schemas.json, resource id urn:openai-responses).
//
//go:embed openapi/responses-schemas.json
var embeddedResponses []byte

// embeddedKey caches the embedded schema in loaded.
const embeddedKey = "embedded:openapi/chat-schemas.json"

// LoadSchema returns the chat schemas: the file $GATEWAY_OPENAPI_SCHEMAS
// names, or the copy embedded in this package (openapi/chat-schemas.json).
// A file that does not load fails the test. The result is shared by every
// test of the binary.
func LoadSchema(tb testing.TB) *Schema {
	tb.Helper()
	if p := os.Getenv(SchemaEnv); p != "" {
		s, err := OpenSchema(p)
		if err != nil {
			tb.Fatalf("wiretest: %s=%q: %v", SchemaEnv, p, err)
		}
		return s
	}
	if s, ok := loaded.Load(embeddedKey); ok {
		return s.(*Schema)
	}
	s, err := newSchema(embeddedKey, schemaID, bytes.NewReader(embedded))
	if err != nil {
		tb.Fatalf("wiretest: %v", err)
	}
	v, _ := loaded.LoadOrStore(embeddedKey, s)
	return v.(*Schema)
}

// LoadResponsesSchema returns the Responses API schemas embedded in this
// package (openapi/responses-schemas.json): validate with names such as
// "Response", "ResponseStreamEvent", "ResponseItemList".
func LoadResponsesSchema(tb testing.TB) *Schema {
	tb.Helper()
	const key = "embedded:openapi/responses-schemas.json"
	if s, ok := loaded.Load(key); ok {
		return s.(*Schema)
	}
	s, err := newSchema(key, "urn:openai-responses", bytes.NewReader(embeddedResponses))
	if err != nil {
		tb.Fatalf("wiretest: %v", err)
	}
	v, _ := loaded.LoadOrStore(key, s)
	return v.(*Schema)
}

// newSchema reads a schema document from r; key names it in errors.
func newSchema(key, id string, r io.Reader) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	comp := jsonschema.NewCompiler()
	if err := comp.AddResource(id, doc); err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return &Schema{path: key, id: id, comp: comp, defs: map[string]*compiled{}}, nil
}

// OpenSchema loads the schema file at path (no skipping; for tools and
// tests that carry their own copy). Loading the same path again returns the
// same *Schema.
func OpenSchema(path string) (*Schema, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if s, ok := loaded.Load(abs); ok {
		return s.(*Schema), nil
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := newSchema(abs, schemaID, f)
	if err != nil {
		return nil, err
	}
	s, _ := loaded.LoadOrStore(abs, n)
	return s.(*Schema), nil
}

// Validate checks the JSON document b against the schema $defs/name (for
// example "CompletionUsage"). The error, if any, names the schema and lists
// the failing instance locations.
func (s *Schema) Validate(name string, b []byte) error {
	s.mu.Lock()
	c, ok := s.defs[name]
	if !ok {
		c = &compiled{}
		s.defs[name] = c
	}
	s.mu.Unlock()
	c.once.Do(func() {
		s.mu.Lock() // the Compiler is not safe for concurrent use
		defer s.mu.Unlock()
		c.sch, c.err = s.comp.Compile(s.id + "#/$defs/" + name)
	})
	if c.err != nil {
		return fmt.Errorf("wiretest: compile %s: %w", name, c.err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("wiretest: %s: invalid JSON: %w", name, err)
	}
	if err := c.sch.Validate(inst); err != nil {
		return fmt.Errorf("wiretest: %s: %w", name, err)
	}
	return nil
}

// Chunk validates one stream chunk (CreateChatCompletionStreamResponse).
func (s *Schema) Chunk(b []byte) error { return s.Validate("CreateChatCompletionStreamResponse", b) }

// Completion validates a non-streamed response (CreateChatCompletionResponse).
func (s *Schema) Completion(b []byte) error {
	return s.Validate("CreateChatCompletionResponse", b)
}

// ErrorBody validates an error envelope (ErrorResponse), as sent in an HTTP
// error body or in the data of a mid-stream error event.
func (s *Schema) ErrorBody(b []byte) error { return s.Validate("ErrorResponse", b) }

// Models validates a GET /v1/models body (ListModelsResponse).
func (s *Schema) Models(b []byte) error { return s.Validate("ListModelsResponse", b) }

// Model validates a GET /v1/models/{model} body (Model).
func (s *Schema) Model(b []byte) error { return s.Validate("Model", b) }

// Request validates a chat request body (CreateChatCompletionRequest).
func (s *Schema) Request(b []byte) error { return s.Validate("CreateChatCompletionRequest", b) }
