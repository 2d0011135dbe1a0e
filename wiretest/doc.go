// Package wiretest is test support for everything that writes OpenAI chat
// streams and bodies: CheckStream enforces the streaming contract of
// shared/reference/openai-wire.md (§1.2 framing, §3.4 re-streaming rules, §9
// checklist) on the exact bytes a client received, and Schema validates
// JSON against the normalized OpenAPI chat schemas.
//
// It is an ordinary package so that other packages' tests can import it; it
// must not be imported by production code.
package wiretest
