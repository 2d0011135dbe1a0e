package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

// searchUpstream plays a search model in a tool loop: asked with no tool
// result yet, it says "Let mé check. " and calls the calculator; asked
// again, it answers "It rains [1]." with a url_citation over "It rains"
// (characters 0 to 8 of its own text), streamed or not.
func searchUpstream(t *testing.T) string {
	head := `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"up-model","choices":[{"index":0,"delta":`
	note := `[{"type":"url_citation","url_citation":{"end_index":8,"start_index":0,"title":"Weather","url":"https://example.com/w"}}]`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		stream := gjson.GetBytes(b, "stream").Bool()
		first := !strings.Contains(string(b), `"role":"tool"`)
		if stream {
			w.Header().Set("Content-Type", "text/event-stream")
			if first {
				_, _ = io.WriteString(w, "data: "+head+`{"role":"assistant","content":"Let mé check. "},"finish_reason":null}]}`+"\n\n"+
					"data: "+head+`{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]},"finish_reason":null}]}`+"\n\n"+
					"data: "+head+`{},"finish_reason":"tool_calls"}]}`+"\n\n"+"data: [DONE]\n\n")
				return
			}
			_, _ = io.WriteString(w, "data: "+head+`{"role":"assistant","content":"It rains [1]."},"finish_reason":null}]}`+"\n\n"+
				"data: "+head+`{"annotations":`+note+`},"finish_reason":null}]}`+"\n\n"+
				"data: "+head+`{},"finish_reason":"stop"}]}`+"\n\n"+"data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if first {
			_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"Let mé check. ",`+
				`"tool_calls":[{"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]},"finish_reason":"tool_calls"}]}`)
			return
		}
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"up-model","choices":[{"index":0,"message":{"role":"assistant","content":"It rains [1].",`+
			`"annotations":`+note+`},"finish_reason":"stop"}]}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// A search model's url_citation annotations reach a Responses client on
// the answer's output_text, in the Responses form, streamed
// (response.output_text.annotation.added, checked against the parts and
// the terminal response) and not, the same: after a server tool's round,
// the last message's offsets count from its own text, where the chat form
// of the same loop counts them from the start of the whole content.
func TestResponsesAnnotations(t *testing.T) {
	t.Parallel()
	h := newHarness(t, strings.NewReplacer("{{MOCK}}", searchUpstream(t), "{{HTTP}}", "http://127.0.0.1:9/").Replace(toolConfig), mockllm.Options{})
	params := responses.ResponseNewParams{Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("weather?")}}
	want := `[{"type":"url_citation","end_index":8,"start_index":0,"title":"Weather","url":"https://example.com/w"}]`
	var outputs []string
	for _, stream := range []bool{false, true} {
		r := h.respond(params, stream)
		raw, _ := h.lastRaw()
		last := r.Output[len(r.Output)-1]
		if last.Type != "message" || len(last.Content) != 1 || last.Content[0].Text != "It rains [1]." {
			t.Fatalf("stream %v: output %s", stream, raw)
		}
		if got := gjson.Get(last.Content[0].RawJSON(), "annotations").Raw; got != want {
			t.Fatalf("stream %v: annotations %s, want %s\n%s", stream, got, want, raw)
		}
		if a := last.Content[0].Annotations; len(a) != 1 || a[0].URL != "https://example.com/w" || a[0].StartIndex != 0 || a[0].EndIndex != 8 {
			t.Fatalf("stream %v: the SDK read %+v", stream, a)
		}
		if stream && !strings.Contains(string(raw), "event: response.output_text.annotation.added\n") {
			t.Fatalf("no annotation.added event:\n%s", raw)
		}
		var items []string
		for _, o := range r.Output {
			items = append(items, o.Type+":"+gjson.Get(o.RawJSON(), "content.0.annotations").Raw)
		}
		outputs = append(outputs, strings.Join(items, " "))
	}
	if outputs[0] != outputs[1] {
		t.Fatalf("JSON and stream differ:\n%s\n%s", outputs[0], outputs[1])
	}

	// The chat form of the same loop counts from the start of the whole
	// content: "Let mé check. " is 14 characters.
	c, err := h.client.Chat.Completions.New(t.Context(), userMsg("weather?"))
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Choices[0].Message.Annotations; len(a) != 1 || a[0].URLCitation.StartIndex != 14 || a[0].URLCitation.EndIndex != 22 {
		t.Fatalf("chat annotations %+v", a)
	}
}
