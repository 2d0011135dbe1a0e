// Package pipeline holds the types every middleware layer shares: the chat
// Request and Response, the Stream of chunks, the Handler and Middleware of
// the request and model-call layers, the ToolHandler of the tool layer, and
// the typed errors that one mapper (in proxy) turns into HTTP.
//
// Nothing here imports fasthttp: a middleware sees bytes and contexts only.
package pipeline
