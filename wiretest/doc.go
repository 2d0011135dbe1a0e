// Package wiretest is test support for everything that writes OpenAI chat
// streams and bodies: CheckStream enforces the streaming contract of
// docs/wire.md (framing, chunks, tool calls, end of stream, errors) on the
// exact bytes a client received, and Schema validates JSON against the
// normalized OpenAPI chat schemas (openapi/chat-schemas.json).
//
// It is an ordinary package so that other packages' tests can import it; it
// must not be imported by production code.
package wiretest
