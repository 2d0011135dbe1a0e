// Package caching holds the gateway's two savings layers and their storage:
//
//   - the response cache (request layer, NewResponseCache): answers a repeated
//     deterministic request from a Store without calling the model, for JSON
//     and streamed clients alike, with single flight for concurrent misses;
//   - the tool-result cache (function layer, NewToolResultCache);
//   - provider prompt-caching hints (model-call layer, NewPromptCache):
//     Anthropic cache_control breakpoints, OpenAI prompt_cache_key, and the
//     accounting of cached prompt tokens.
//
// Stores (NewMemoryStore, NewRedisStore) fail open: a store error is a miss
// for the caller, counted in a metric and logged at most once per 10 s.
package caching
