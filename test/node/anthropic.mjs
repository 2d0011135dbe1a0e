// Driven by gateway/anthropic_test.go: the real `openai` npm package against
// a gateway whose model is Claude behind the native Anthropic provider (the
// mock answers in Anthropic's Messages form). Exits non-zero on any failure.
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.env.GATEWAY_BASE_URL;
const model = process.env.GATEWAY_MODEL ?? "claude-small";
assert.ok(baseURL, "GATEWAY_BASE_URL is required");
const client = new OpenAI({ baseURL, apiKey: "sk-node", maxRetries: 0 });
const system = { role: "system", content: "You are terse." };

// 1. Text, streamed and not.
{
  const stream = client.chat.completions.stream({ model, messages: [system, { role: "user", content: "hello" }] });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, "Hi there, ünïcode 🌍");
  assert.equal(final.model, model);
  const json = await client.chat.completions.create({ model, messages: [system, { role: "user", content: "hello" }] });
  assert.equal(json.choices[0].message.content, "Hi there, ünïcode 🌍");
  assert.equal(json.usage.prompt_tokens_details.cached_tokens, 20);
  console.log("text: ok");
}

// 2. Parallel client tool calls, their arguments accumulated exactly.
{
  const stream = client.chat.completions.stream({
    model,
    messages: [system, { role: "user", content: "weather in Oslo?" }],
    tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }],
  });
  const final = await stream.finalChatCompletion();
  const calls = final.choices[0].message.tool_calls;
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  assert.equal(calls.length, 2);
  assert.equal(calls[0].function.arguments, '{"city":"Köln","note":"naïve 🌧 \\"quoted\\""}');
  assert.equal(calls[1].function.arguments, '{"city":"Zürich"}');
  console.log("tools: ok");
}

// 3. The server-tool loop: usage summed over three rounds.
{
  const stream = client.chat.completions.stream({
    model,
    messages: [system, { role: "user", content: "compute 6*7 then 2+3" }],
    stream_options: { include_usage: true },
  });
  const final = await stream.finalChatCompletion();
  assert.ok(final.choices[0].message.content.startsWith("Final: "));
  assert.equal(final.choices[0].message.tool_calls ?? undefined, undefined, "server calls never reach the client");
  assert.equal(final.usage.prompt_tokens, 600);
  assert.equal(final.usage.prompt_tokens_details.cached_tokens, 120);
  console.log("loop: ok");
}
