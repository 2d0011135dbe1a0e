// Driven by gateway/approval_test.go: the real `openai` npm package's
// runTools() against a gateway where delete_file needs a person's approval.
// The client defines a function named after the gated tool that returns the
// decision; the gateway runs the tool and the runner gets the final answer.
// Exits non-zero with a message on any failure.
import OpenAI from "openai";
import assert from "node:assert/strict";

const baseURL = process.env.GATEWAY_BASE_URL;
const apiKey = process.env.GATEWAY_API_KEY ?? "sk-client";
assert.ok(baseURL, "GATEWAY_BASE_URL is required");
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });

for (const stream of [false, true]) {
  const asked = [];
  const runner = client.chat.completions.runTools({
    model: "gpt-x",
    stream,
    messages: [{ role: "user", content: `clean up (runTools, stream=${stream})` }],
    tools: [
      {
        type: "function",
        function: {
          name: "delete_file",
          description: "Asks the person at the keyboard; returns their decision.",
          parameters: { type: "object", properties: { path: { type: "string" } } },
          parse: JSON.parse,
          function: async (args) => {
            asked.push(args.path);
            return { decision: "approve" }; // or "reject" with a message, or "edit" with arguments
          },
        },
      },
    ],
  });
  const final = await runner.finalChatCompletion();
  const content = final.choices[0].message.content;
  assert.deepEqual(asked, ["/tmp/a"], `the person was asked about ${JSON.stringify(asked)}`);
  assert.equal(final.choices[0].finish_reason, "stop");
  assert.match(content, /"deleted":"\/tmp\/a"/, `final answer ${content}`);
  assert.ok(!content.includes('"decision"'), `the decision reached the model: ${content}`);
  console.log(`runTools approval stream=${stream}: ok`);
}
