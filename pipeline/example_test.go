package pipeline_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/llmgw/gateway/pipeline"
)

// trace returns a middleware that prints when a request passes in and out.
func trace(name string) pipeline.Middleware {
	return func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(ctx context.Context, r *pipeline.Request) (*pipeline.Response, error) {
			fmt.Println("in ", name)
			resp, err := next.Chat(ctx, r)
			fmt.Println("out", name)
			return resp, err
		})
	}
}

var model = pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
	fmt.Println("model")
	return &pipeline.Response{Body: []byte(`{}`)}, nil
})

// The first middleware listed is the outermost.
func ExampleChain() {
	h := pipeline.Chain(model, trace("policy"), trace("cache"))
	_, _ = h.Chat(context.Background(), &pipeline.Request{})
	// Output:
	// in  policy
	// in  cache
	// model
	// out cache
	// out policy
}

// Termination form 1: a middleware returns a result without calling next (a
// cache hit); the layers outside it still post-process.
func ExampleChain_shortCircuit() {
	hit := func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			fmt.Println("cache hit")
			return &pipeline.Response{Body: []byte(`{"cached":true}`)}, nil
		})
	}
	h := pipeline.Chain(model, trace("policy"), hit)
	resp, _ := h.Chat(context.Background(), &pipeline.Request{})
	fmt.Println(string(resp.Body))
	// Output:
	// in  policy
	// cache hit
	// out policy
	// {"cached":true}
}

// Termination form 3: an error propagates outwards unchanged; one mapper (in
// proxy) turns it into HTTP.
func ExampleChain_error() {
	deny := func(next pipeline.Handler) pipeline.Handler {
		return pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			return nil, pipeline.Forbidden(pipeline.CodePathNotAllowed, "not for you")
		})
	}
	h := pipeline.Chain(model, trace("observe"), deny)
	_, err := h.Chat(context.Background(), &pipeline.Request{})
	var pe *pipeline.Error
	fmt.Println(errors.As(err, &pe), pe.Status, pe.Code)
	// Output:
	// in  observe
	// out observe
	// true 403 path_not_allowed
}

// Termination form 2: a tool-layer middleware returns a stop result; the tool
// loop ends after this turn without another model call.
func ExampleChainTools_stop() {
	exec := pipeline.ToolHandlerFunc(func(_ context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
		return &pipeline.ToolResult{CallID: c.ID, Content: []byte(`{"status":"ok","data":42}`)}, nil
	})
	final := func(next pipeline.ToolHandler) pipeline.ToolHandler {
		return pipeline.ToolHandlerFunc(func(ctx context.Context, c *pipeline.ToolCall) (*pipeline.ToolResult, error) {
			res, err := next.CallTool(ctx, c)
			if err == nil && c.Name == "submit_answer" {
				res.Stop = true
			}
			return res, err
		})
	}
	h := pipeline.ChainTools(exec, final)
	res, _ := h.CallTool(context.Background(), &pipeline.ToolCall{ID: "call_1", Name: "submit_answer"})
	fmt.Println(res.Stop, string(res.Content))
	// Output:
	// true {"status":"ok","data":42}
}
