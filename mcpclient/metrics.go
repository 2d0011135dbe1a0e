package mcpclient

import (
	"github.com/llmgw/gateway/observe"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	metricUp = observe.Factory.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_mcp_server_up",
		Help: "1 while the MCP server is connected and its tools are offered, else 0.",
	}, []string{"server"})
	metricTools = observe.Factory.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gateway_mcp_server_tools",
		Help: "Tools the MCP server currently contributes (after prefix, allow and deny).",
	}, []string{"server"})
	// serverHolders are the servers (of every live Manager) that set each
	// server name's up and tools series.
	serverHolders = observe.NewHeld(func(name string) {
		metricUp.DeleteLabelValues(name)
		metricTools.DeleteLabelValues(name)
	})
	metricConnects = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_mcp_connects_total",
		Help: "MCP connection attempts by server and result (ok|error).",
	}, []string{"server", "result"})
	metricCalls = observe.Factory.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_mcp_calls_total",
		Help: "MCP tools/call requests by server and result (ok|tool_error|rpc_error|unreadable|error|timeout|cancelled): rpc_error is a JSON-RPC error the server answered with, unreadable an answer with a content type the gateway cannot read, error a transport failure, timeout a call its deadline ended first, cancelled one whose request ended first.",
	}, []string{"server", "result"})
)
