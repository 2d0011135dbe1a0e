package pipeline

import "context"

// Handler serves one chat call. The request layer sees one call per client
// request; the model-call layer sees one call per upstream attempt inside the
// tool loop. Implementations must be safe for concurrent use.
type Handler interface {
	Chat(ctx context.Context, r *Request) (*Response, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, r *Request) (*Response, error)

// Chat calls f.
func (f HandlerFunc) Chat(ctx context.Context, r *Request) (*Response, error) { return f(ctx, r) }

// Middleware wraps a Handler. Not calling next short-circuits (a cache hit, a
// policy denial); calling next again retries (fallback).
type Middleware func(next Handler) Handler

// Chain composes mws around h once, at start. mws[0] is the outermost; a nil
// middleware is skipped.
func Chain(h Handler, mws ...Middleware) Handler { return compose(h, mws) }

// compose wraps h in mws, the last innermost, skipping nil ones: the one
// composition rule of both layers (Chain, ChainTools).
func compose[H any, M ~func(H) H](h H, mws []M) H {
	for i := len(mws) - 1; i >= 0; i-- {
		if mws[i] != nil {
			h = mws[i](h)
		}
	}
	return h
}
