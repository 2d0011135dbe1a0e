// Package anthropic translates between the gateway's chat completions JSON
// and Anthropic's Messages API, so that a provider of kind "anthropic" sits
// behind the same pipeline as any OpenAI-compatible one.
//
// TranslateRequest turns a chat request body (after the model-call layer:
// the prompt-cache middleware's cache_control markers included) into a
// Messages request. DecodeMessage turns a Messages response into a
// chat.completion, and StreamDecoder turns a Messages event stream into
// chat.completion.chunk objects, both through the wire encoders. StatusError
// and the decoders' error events become *pipeline.UpstreamError with an
// OpenAI-style error body, so fallback, retries and the proxy's error mapper
// read them as they read any upstream's; Renumber makes the message
// indexes such an error names count the chat body's messages.
//
// Nothing here does I/O; every function is safe for concurrent use, and a
// StreamDecoder serves one stream.
package anthropic
