// Package mcpclient connects the gateway to MCP tool servers
// ([[mcp_servers]]) with the official Go SDK, over stdio (a child process)
// or Streamable HTTP, and offers their tools to the tool loop as server tools.
//
// A Manager keeps one connection per server, each in its own goroutine:
// connect, list the tools (prefix, allow/deny applied), then wait for the
// connection to end or the server to announce a changed tool list, and
// reconnect with exponential backoff. A server that is down contributes no
// tools: requests go on with the tools of the others. The current tool set is
// an immutable snapshot behind an atomic pointer, with a version that changes
// whenever the set does, so the tool loop's per-request check is one atomic
// load.
package mcpclient
