// Package toolloop is the terminal handler of the request layer: it offers
// the configured server-side tools to the model, runs the tool calls the
// model makes (through the tool middleware chain, the "function layer"), and
// calls the model again until it answers, asks for a client-side tool, or a
// budget ends the loop. The client sees one coherent chat completion, streamed
// or not, that follows the streaming rules of docs/wire.md.
//
// Files: loop.go (Loop, New, Chat, fast path), prepare.go (per-request tool
// set, injection, tool_choice), accumulate.go (tool-call delta accumulator),
// stream.go (the pull-based re-streamer; roundsize.go bounds what a round
// keeps and tells when a call's arguments are complete), blocking.go (the non-streaming
// loop), decide.go (the end-of-round rule both follow), turn.go (what both
// share: history, budgets, running a turn's calls), chunk.go (an answer as
// a stream), usage.go, trace.go (x_gateway), registry.go and the executors
// (builtin.go, calc.go, httptool.go, agent.go), source.go and sources.go
// (tools that come and go: MCP servers, OpenAPI specs), toolselect.go (the
// tool selection hook), middleware.go (the tool chain; its argument
// validation in validate.go, its result size cap in sizecap.go), result.go
// (result envelopes), metrics.go, state.go with state_memory.go and
// state_redis.go (the mixed-turn state store), resume.go (a client's
// history rebuilt from it), approval.go and verdict.go (human approval of
// gated tools), limits.go (per-request limits on tool and model calls),
// todos.go (the write_todos planning tool).
package toolloop
