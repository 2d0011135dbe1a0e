// Driven by gateway/toolselect_test.go: the real `openai` npm package's
// runTools() with 38 client functions against a gateway that selects the
// tools of each request. The model calls a server tool, then the client's
// tool_17 (run here), then answers. Exits non-zero on any failure.
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.env.GATEWAY_BASE_URL;
assert.ok(baseURL, "GATEWAY_BASE_URL is required");
const client = new OpenAI({ baseURL, apiKey: "sk-node", maxRetries: 0 });

const seen = [];
const tools = [];
for (let i = 0; i < 38; i++) {
  const name = `tool_${String(i).padStart(2, "0")}`;
  tools.push({
    type: "function",
    function: {
      name,
      description: `Does thing number ${i}`,
      parameters: { type: "object", properties: {} },
      parse: JSON.parse,
      function: async () => {
        seen.push(name);
        return { thing: i };
      },
    },
  });
}
const runner = client.chat.completions.runTools({
  model: process.env.GATEWAY_MODEL ?? "gpt-x",
  stream: true,
  messages: [{ role: "user", content: "compute 6*7 and then do thing 17" }],
  tools,
});
const final = await runner.finalChatCompletion();
const content = final.choices[0].message.content;
assert.deepEqual(seen, ["tool_17"], `the runner ran ${JSON.stringify(seen)}`);
assert.match(content, /"thing":17/, `final answer ${content}`);
console.log("runTools: ok");
