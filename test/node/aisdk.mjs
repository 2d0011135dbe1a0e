// Driven by gateway/aisdk_test.go: the Vercel AI SDK (`ai`) with its OpenAI
// (chat) and OpenAI-compatible providers against a gateway whose model, under
// tool_choice "required", first calls a server tool (run inside the gateway)
// and then the client's tool. The SDK checks that a step made under a forced
// tool choice holds a tool call (ToolChoiceViolationError otherwise), so the
// answer must hand the client's call over. Exits non-zero on any failure.
import { generateText, streamText, tool, jsonSchema } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.env.GATEWAY_BASE_URL;
const modelName = process.env.GATEWAY_MODEL ?? "gpt-x";
assert.ok(baseURL, "GATEWAY_BASE_URL is required");

const providers = {
  openai: createOpenAI({ baseURL, apiKey: "sk-node" }).chat(modelName),
  compatible: createOpenAICompatible({ name: "gw", baseURL, apiKey: "sk-node", includeUsage: true }).chatModel(modelName),
};

const ran = [];
const tools = {
  get_weather: tool({
    description: "Weather for a city",
    inputSchema: jsonSchema({ type: "object", properties: { city: { type: "string" } }, required: ["city"] }),
    execute: async ({ city }) => {
      ran.push(city);
      return { city, temp_c: 3 };
    },
  }),
};

function checkStep(label, toolCalls, toolResults) {
  assert.equal(toolCalls.length, 1, `${label}: one tool call, got ${JSON.stringify(toolCalls)}`);
  assert.equal(toolCalls[0].toolName, "get_weather", `${label}: only the client tool reaches the client`);
  assert.deepEqual(toolCalls[0].input, { city: "Oslo" });
  assert.equal(toolResults.length, 1, `${label}: the SDK ran the client tool`);
}

// Each case runs, and any failure is reported, before the script exits 1.
let failed = 0;
async function check(label, fn) {
  try {
    await fn();
    console.log(`${label}: ok`);
  } catch (e) {
    failed++;
    console.log(`${label}: FAIL ${e.name}: ${e.message}`);
  }
}

for (const [name, model] of Object.entries(providers)) {
  const prompt = `What is 6*7 and the weather in Oslo? (${name})`;
  await check(`${name} generateText`, async () => {
    const res = await generateText({ model, tools, toolChoice: "required", prompt, maxRetries: 0 });
    checkStep(`${name} generateText`, res.toolCalls, res.toolResults);
    assert.equal(res.finishReason, "tool-calls");
  });
  await check(`${name} streamText`, async () => {
    const errors = [];
    const res = streamText({ model, tools, toolChoice: "required", prompt, maxRetries: 0, onError: ({ error }) => errors.push(error) });
    for await (const part of res.fullStream) {
      if (part.type === "error") errors.push(part.error);
    }
    assert.equal(errors.length, 0, `${name} streamText: ${errors.map((e) => `${e.name}: ${e.message}`).join("; ")}`);
    checkStep(`${name} streamText`, await res.toolCalls, await res.toolResults);
    assert.equal(await res.finishReason, "tool-calls");
  });
}

// The openai npm package does not check tool_choice; it gets the same call.
await check("openai npm stream", async () => {
  const client = new OpenAI({ baseURL, apiKey: "sk-node", maxRetries: 0 });
  const final = await client.chat.completions
    .stream({
      model: modelName,
      messages: [{ role: "user", content: "What is 6*7 and the weather in Oslo? (openai npm)" }],
      tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }],
      tool_choice: "required",
    })
    .finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  assert.deepEqual(final.choices[0].message.tool_calls.map((c) => c.function.name), ["get_weather"]);
});
assert.equal(failed, 0, `${failed} failed`);
assert.equal(ran.length, 4, `the client tool ran ${ran.length} times`);
