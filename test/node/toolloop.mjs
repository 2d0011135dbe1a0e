// Driven by TestNodeSDKToolLoop (gateway/toolloop_test.go): the real `openai` npm package against a
// gateway whose model calls a server tool (run inside the gateway) and then a
// client tool (run here). Exits non-zero with a message on any failure.
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.env.GATEWAY_BASE_URL;
const model = process.env.GATEWAY_MODEL ?? "gpt-x";
const serverTool = process.env.GATEWAY_SERVER_TOOL ?? "calculator";
assert.ok(baseURL, "GATEWAY_BASE_URL is required");

const client = new OpenAI({ baseURL, apiKey: "sk-node", maxRetries: 0, defaultHeaders: { "x-gateway-tool-trace": "1" } });
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather for a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};

// 1. stream() helper: the first turn ends with the client tool call only.
{
  const stream = client.chat.completions.stream({
    model,
    messages: [{ role: "user", content: "What is 6*7 and the weather in Oslo?" }],
    tools: [weatherTool],
    stream_options: { include_usage: true },
  });
  const final = await stream.finalChatCompletion();
  const msg = final.choices[0].message;
  assert.equal(final.choices[0].finish_reason, "tool_calls");
  assert.equal(msg.tool_calls.length, 1, "only the client tool call reaches the client");
  assert.equal(msg.tool_calls[0].function.name, "get_weather");
  assert.deepEqual(JSON.parse(msg.tool_calls[0].function.arguments), { city: "Oslo" });
  assert.ok(final.usage && final.usage.total_tokens > 0, "usage summed over the rounds");
  console.log("stream: ok");
}

// 2. runTools(): the runner only ever sees the client tool.
{
  const seen = [];
  const runner = client.chat.completions.runTools({
    model,
    stream: true,
    messages: [{ role: "user", content: "What is 6*7 and the weather in Oslo?" }],
    tools: [
      {
        type: "function",
        function: {
          ...weatherTool.function,
          parse: JSON.parse,
          function: async (args) => {
            seen.push("get_weather");
            return { city: args.city, temp_c: 3 };
          },
        },
      },
    ],
  });
  runner.on("functionToolCall", (call) => {
    if (call.name !== "get_weather") seen.push("unexpected:" + call.name);
  });
  const final = await runner.finalChatCompletion();
  const content = final.choices[0].message.content;
  assert.deepEqual(seen, ["get_weather"], `the runner saw ${JSON.stringify(seen)}`);
  assert.ok(!JSON.stringify(runner.messages).includes(serverTool), "no server tool call in the runner's messages");
  assert.match(content, /temp_c/, `final answer ${content}`);
  // The follow-up reached the model with the server round it had run.
  assert.match(content, /^6\*7=42 /, `final answer ${content}`);
  console.log("runTools: ok");
}
