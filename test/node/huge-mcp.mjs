// A stateless MCP server over Streamable HTTP (the TypeScript SDK's
// transport, as most Node MCP servers run it) with one tool, "huge", that
// answers n bytes of text: driven by mcpclient's tests of an answer over
// the gateway's bound on one message. Usage: node huge-mcp.mjs PORT
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";
import http from "node:http";

function build() {
  const s = new McpServer({ name: "huge", version: "1.0.0" });
  s.tool("huge", "answers n bytes of text", { n: z.number() }, async ({ n }) => ({ content: [{ type: "text", text: "x".repeat(n) }] }));
  s.tool("small", "answers ok", {}, async () => ({ content: [{ type: "text", text: "ok" }] }));
  return s;
}

http.createServer((req, res) => {
  let body = "";
  req.on("data", (d) => (body += d));
  req.on("end", async () => {
    const s = build();
    const t = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => { t.close(); s.close(); });
    await s.connect(t);
    await t.handleRequest(req, res, body ? JSON.parse(body) : undefined);
  });
}).listen(+process.argv[2], "127.0.0.1");
