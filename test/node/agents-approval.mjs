// Driven by gateway/approval_test.go: @openai/agents against a gateway where
// delete_file needs a person's approval. The agent declares the gateway as
// a hosted MCP server (server_label "gateway"), so the SDK surfaces the
// gateway's mcp_approval_request as an interruption; the run is approved and
// resumed, and the gateway runs the tool. Exits non-zero on any failure.
import OpenAI from "openai";
import assert from "node:assert/strict";
import { Agent, run, hostedMcpTool, setDefaultOpenAIClient, setTracingDisabled } from "@openai/agents";

const baseURL = process.env.GATEWAY_BASE_URL;
assert.ok(baseURL, "GATEWAY_BASE_URL is required");
setTracingDisabled(true);
setDefaultOpenAIClient(new OpenAI({ baseURL, apiKey: process.env.GATEWAY_API_KEY ?? "sk-client", maxRetries: 0 }));

for (const stream of [false, true]) {
  const agent = new Agent({
    name: "cleaner",
    model: "gpt-x",
    tools: [hostedMcpTool({ serverLabel: "gateway", serverUrl: "http://unused.invalid/mcp", requireApproval: "always" })],
  });
  let result = await run(agent, `clean up (agents, stream=${stream})`, { stream });
  if (stream) await result.completed;
  assert.equal(result.interruptions?.length, 1, `interruptions: ${JSON.stringify(result.interruptions)}`);
  for (const it of result.interruptions) result.state.approve(it);
  result = await run(agent, result.state, { stream });
  if (stream) await result.completed;
  const out = String(result.finalOutput);
  assert.match(out, /"deleted":"\/tmp\/a"/, `final output ${out}`);
  console.log(`agents approval stream=${stream}: ok`);
}
