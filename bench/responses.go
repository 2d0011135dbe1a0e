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
func (b *bench) responses() *scenarioResult {
	ls := b.spec(0, b.set.Concurrency, b.set.LegSeconds)
	r := &scenarioResult{Name: "responses", Title: "Responses API against chat completions on the gateway, closed model", Load: ls.String()}
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
		{b.gateway, b.gateway.plain(chatBody, "x-gateway-cache", noCacheHit)},
		{b.gateway, b.gateway.plainTo(responsesPath, respBody, "", completed(""))},
		{b.gateway, b.gateway.plain(toolBody, "", toolLoopAnswer)},
		{b.gateway, b.gateway.plainTo(responsesPath, respToolBody, "", completed("done after 2 tool rounds"))},
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
