// Driven by gateway/responses_test.go: the @openai/agents SDK with its
// default Responses model against a gateway that serves /v1/responses
// through its tool loop. The model runs a server tool (inside the gateway)
// and a client tool (here, through the agent). Exits non-zero on failure.
import OpenAI from "openai";
import assert from "node:assert/strict";
import { Agent, run, tool, setDefaultOpenAIClient, setTracingDisabled } from "@openai/agents";
import { z } from "zod";

const baseURL = process.env.GATEWAY_BASE_URL;
assert.ok(baseURL, "GATEWAY_BASE_URL is required");
setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey: "sk-node", maxRetries: 0 }));
setTracingDisabled(true);

const calls = [];
const getWeather = tool({
  name: "get_weather",
  description: "Weather for a city",
  parameters: z.object({ city: z.string() }),
  execute: async ({ city }) => {
    calls.push(city);
    return JSON.stringify({ city, temp_c: 21 });
  },
});
const agent = new Agent({ name: "helper", instructions: "Answer briefly.", model: process.env.GATEWAY_MODEL ?? "gpt-x", tools: [getWeather] });

{
  const result = await run(agent, "What is 6*7 and the weather in Oslo?");
  // "6*7=42": the agent replays the gateway's mcp_call without its output,
  // and the model still sees the calculator's result.
  assert.match(String(result.finalOutput), /6\*7=42 and Oslo: .*temp_c/);
  assert.deepEqual(calls, ["Oslo"]);
  const kinds = result.newItems.map((i) => i.type);
  assert.ok(kinds.includes("tool_call_item") && kinds.includes("tool_call_output_item"), `items: ${kinds}`);
  console.log("run: ok");
}

{
  const stream = await run(agent, "What is 6*7 and the weather in Oslo?", { stream: true });
  let text = "";
  for await (const ev of stream) {
    if (ev.type === "raw_model_stream_event" && ev.data.type === "output_text_delta") text += ev.data.delta;
  }
  await stream.completed;
  assert.match(String(stream.finalOutput), /6\*7=42 and Oslo: .*temp_c/);
  assert.ok(text.length > 0, "text deltas were streamed");
  assert.deepEqual(calls, ["Oslo", "Oslo"]);
  console.log("stream: ok");
}
