package proxy

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/responses"
	"github.com/llmgw/gateway/wire"
)

// A JSON Responses answer places the tool loop's server calls among its
// texts where the stream has them: after the reasoning and the text of the
// rounds before each, before those of the rounds after.
func TestResponsesJSONPlacesServerCalls(t *testing.T) {
	f := &responsesForm{rq: &responses.Request{}, enc: wire.NewResponsesJSON(wire.ResponsesHeader{ID: "resp_1", Model: "m"})}
	call := func(name string, at *pipeline.TextsAt) {
		f.serverCall(&pipeline.ServerCall{Name: name, Source: "builtin", Arguments: []byte(`{}`), Output: []byte(`{"data":1}`), At: at})
	}
	call("a", &pipeline.TextsAt{ReasoningContent: 6, Content: 3})
	call("b", &pipeline.TextsAt{ReasoningContent: 6, Content: 3}) // the same round
	call("c", &pipeline.TextsAt{ReasoningContent: 12, Content: 6})
	out := f.body([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant",` +
		`"reasoning_content":"think1think2think3","content":"onetwothree"},"finish_reason":"stop"}]}`))
	var items []string
	gjson.GetBytes(out, "output").ForEach(func(_, it gjson.Result) bool {
		switch typ := it.Get("type").Str; typ {
		case "message":
			items = append(items, "message:"+it.Get("content.0.text").Str)
		case "reasoning":
			items = append(items, "reasoning:"+it.Get("content.0.text").Str+it.Get("summary.0.text").Str)
		default:
			items = append(items, typ+":"+it.Get("name").Str)
		}
		return true
	})
	want := "reasoning:think1|message:one|mcp_call:a|mcp_call:b|reasoning:think2|message:two|mcp_call:c|reasoning:think3|message:three"
	if got := strings.Join(items, "|"); got != want {
		t.Fatalf("output %s\nwant   %s\n%s", got, want, out)
	}
}

// A cut that falls inside a character (the text changed after the loop
// counted it) moves back to the character's start: the JSON answer never
// holds a broken character.
func TestResponsesJSONCutsAtCharacters(t *testing.T) {
	f := &responsesForm{rq: &responses.Request{}, enc: wire.NewResponsesJSON(wire.ResponsesHeader{ID: "resp_1", Model: "m"})}
	f.serverCall(&pipeline.ServerCall{Name: "a", Source: "builtin", Arguments: []byte(`{}`), Output: []byte(`{}`), At: &pipeline.TextsAt{Content: 2}})
	out := f.body([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"aé b"},"finish_reason":"stop"}]}`))
	var texts []string
	gjson.GetBytes(out, "output.#.content.0.text").ForEach(func(_, v gjson.Result) bool { texts = append(texts, v.Str); return true })
	if strings.Join(texts, "|") != "a|é b" || strings.Contains(string(out), `\ufffd`) || strings.ContainsRune(string(out), utf8.RuneError) {
		t.Fatalf("texts %q\n%s", texts, out)
	}
}

// A JSON answer asked for logprobs whose texts a server call parts gives
// each message item the tokens of its own text, as the stream has them
// (each round's chunks with its message item).
func TestResponsesJSONCutsLogprobs(t *testing.T) {
	f := &responsesForm{rq: &responses.Request{}, enc: wire.NewResponsesJSON(wire.ResponsesHeader{ID: "resp_1", Model: "m", Logprobs: true})}
	f.serverCall(&pipeline.ServerCall{Name: "a", Source: "builtin", Arguments: []byte(`{}`), Output: []byte(`{}`), At: &pipeline.TextsAt{Content: 3}})
	out := f.body([]byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"onetwo"},` +
		`"logprobs":{"content":[{"token":"on","logprob":-1,"bytes":[111,110],"top_logprobs":[]},{"token":"e","logprob":-2,"bytes":[101],"top_logprobs":[]},` +
		`{"token":"two","logprob":-3,"bytes":[116,119,111],"top_logprobs":[]}],"refusal":null},"finish_reason":"stop"}]}`))
	o := gjson.ParseBytes(out)
	if o.Get("output.0.content.0.logprobs.#.token").Raw != `["on","e"]` || o.Get("output.1.type").Str != "mcp_call" ||
		o.Get("output.2.content.0.logprobs.#.token").Raw != `["two"]` {
		t.Fatalf("%s", out)
	}
}
