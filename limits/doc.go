// Package limits shares a gateway fairly: rate limits ([[limits]]: requests,
// tokens and tool calls per minute, requests in flight), spend budgets
// ([[budgets]]), and the usage and cost record behind them.
//
// The hooks, by layer: Middleware (request layer) takes every
// matching limit and budget at once, all or nothing, in one store round
// trip, and sets OpenAI's x-ratelimit-* headers (Hold takes them the same
// way for a pass-through request, outside the pipeline, and its Call
// charges the answer and frees the slot in flight); AdmitRound (a tool
// loop's rounds after the first, in their model-call layer) checks the
// budgets and token counters again, taking nothing; Meter (innermost on the
// model-call layer) prices every upstream call, corrects the token counters
// by the upstream's usage and records usage; ToolLimit (tool layer) counts
// server tool calls. The store is Redis when configured (one Lua script per
// check, so replicas share one counter) or memory.
package limits
