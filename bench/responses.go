package main

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

const responsesPath = "/v1/responses"

// The Responses API forms of chatBody and toolBody: the same prompt, so the
// mock does the same work behind both.
var (
	respBody     = []byte(`{"model":"chat","temperature":0.7,"instructions":"You are a concise assistant.","input":"Summarise the plot of Hamlet in two sentences."}`)
	respToolBody = []byte(`{"model":"tools-2","temperature":0.7,"input":"compute twice"}`)
)

// responses compares the Responses API with chat completions on the
// gateway, closed model: the same pass-through prompt and the same
// two-round tool loop, each as a chat request and as a Responses request
// (translated, encoded as Responses objects and stored in the memory
// store). The ratios are what serving the Responses API costs on top of
// chat.
//
// It runs on a gateway of its own, started with the bench gateway's config
// and stopped at its end: the stored responses fill the memory store (64 MiB
// by default), and on the bench gateway they would stay in the live heap that
// every later collection marks, which lengthens the marks (from about 10 ms to
// 20–100 ms in a run of 2026-11-24) and with them the tails the later
// scenarios measure, the saturation sweep's above all.
func (b *bench) responses() *scenarioResult {
	ls := b.spec(0, b.set.Concurrency, b.set.LegSeconds)
	r := &scenarioResult{Name: "responses", Title: "Responses API against chat completions on the gateway, closed model", Load: ls.String()}
	cfg, err := writeGatewayConfig(b.bins.dir, "gateway-responses", "127.0.0.1:0", b.api.addr, b.api.addr, 20000, b.set.buffers())
	if err != nil {
		r.Status, r.Reason = "failed", err.Error()
		return r
	}
	c, err := b.procs.start("gateway-responses", b.bins.gateway, b.gatewayArgs("gateway-responses", cfg)...)
	if err != nil {
		r.Status, r.Reason = "failed", err.Error()
		return r
	}
	defer b.procs.stop(c)
	gw := newTarget("gateway", c, b.api, 4096)
	completed := func(prefix string) func(string, []byte) error {
		return func(_ string, body []byte) error {
			if gjson.GetBytes(body, "status").Str != "completed" {
				return fmt.Errorf("response not completed: %.200s", body)
			}
			text := gjson.GetBytes(body, `output.#(type=="message").content.0.text`).Str
			if !strings.HasPrefix(text, prefix) {
				return fmt.Errorf("unexpected answer %.120q", text)
			}
			return nil
		}
	}
	legs := b.legs([]job{
		{gw, gw.plain(chatBody, "x-gateway-cache", noCacheHit)},
		{gw, gw.plainTo(responsesPath, respBody, "", completed(""))},
		{gw, gw.plain(toolBody, "", toolLoopAnswer)},
		{gw, gw.plainTo(responsesPath, respToolBody, "", completed("done after 2 tool rounds"))},
	}, ls)
	for i, step := range []string{"chat pass-through", "responses pass-through", "chat tool loop", "responses tool loop"} {
		legs[i].Step = step
	}
	r.Legs = legs
	if finish(r).Status != "ok" {
		return r
	}
	r.fig("responses/chat throughput, pass-through", ratio(legs[1].ThroughputRPS, legs[0].ThroughputRPS), "×")
	r.fig("responses/chat CPU per request, pass-through", ratio(legs[1].ProxyCPUPer1k, legs[0].ProxyCPUPer1k), "×")
	r.fig("responses/chat throughput, tool loop", ratio(legs[3].ThroughputRPS, legs[2].ThroughputRPS), "×")
	r.fig("responses/chat CPU per request, tool loop", ratio(legs[3].ProxyCPUPer1k, legs[2].ProxyCPUPer1k), "×")
	return r
}
