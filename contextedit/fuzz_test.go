package contextedit

import (
	"context"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

func FuzzCount(f *testing.F) {
	f.Add([]byte(cookbookMessages))
	f.Add(chatBody(loop(2, 1, search)...))
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"\ud83d"}]}]}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","tool_calls":[{},{"custom":{"name":1}}],"function_call":{"name":"f"}}],"tools":[]}`))
	f.Add([]byte("{\"messages\":[{\"content\":\"\xff\xfe\"}]}"))
	c := counter(f, "o200k_base")
	f.Fuzz(func(t *testing.T, body []byte) {
		n, err := c.Count(body)
		if err != nil {
			return
		}
		if n < tokensPriming {
			t.Fatalf("Count = %d", n)
		}
		// Count sums as it reads; the transcript that editing builds must
		// agree with it.
		tr, err := parse(body, c)
		if err != nil {
			t.Fatalf("Count accepted what parse refuses: %v", err)
		}
		if m := tr.count(pipeline.PromptHint{}); m != n {
			t.Fatalf("Count = %d, transcript count = %d", n, m)
		}

		if b := cheapBound(body); b >= 0 && b < n {
			t.Fatalf("cheapBound %d < Count %d", b, n)
		}
		c.CountText(string(body))
	})
}

func FuzzMiddleware(f *testing.F) {
	f.Add(chatBody(loop(6, 4, search)...), 500, 1, 0, false, false)
	f.Add(chatBody(turns(3)...), 300, 0, 50, true, true)
	f.Add([]byte(`{"messages":[{"role":"tool","tool_call_id":"x","content":[{"type":"text","text":"long long long long long"}]},{"role":"user"}]}`), 10, 0, 0, true, true)
	f.Add([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"id":"a","custom":{"name":"c","input":"zzzzzzzzzzzzzzzzzzzzzzzz"}}]},{"role":"tool","tool_call_id":"a","content":"yyyyyyyyyyyyyyyyyyyyyyyy yyyyyy"},{"role":"user","content":"q"}]}`), 20, 0, 0, true, true)
	f.Fuzz(func(t *testing.T, body []byte, window, keep, atLeast int, inputs, drop bool) {
		cfg := ceConfig(func(c *config.ContextEdit) {
			c.Trigger, c.Keep, c.ClearAtLeast, c.ClearToolInputs = 0.5, keep%8, atLeast%1000, inputs
			if drop {
				c.LastResort = "drop_turns"
			}
		})
		h, next := newHandler(cfg)
		ctx, elog := context.Background(), &EditLog{}
		req := request(body, window%100000)
		req.EditLog = elog
		_, err1 := h.Chat(ctx, req)
		_, err2 := h.Chat(ctx, req) // again with the log: same result
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("second pass: %v, first %v", err2, err1)
		}
		if err1 != nil {
			return
		}
		a, b := next.reqs[0].Body, next.reqs[1].Body
		if string(a) != string(b) {
			t.Fatalf("two passes differ:\n%s\n%s", a, b)
		}
		if gjson.ValidBytes(body) && !gjson.ValidBytes(a) {
			t.Fatalf("edited body is not JSON: %s", a)
		}
		if _, err := elog.Apply(body); err != nil && gjson.ValidBytes(body) && gjson.GetBytes(body, "messages").IsArray() && gjson.ParseBytes(body).IsObject() {
			t.Fatalf("Apply: %v", err)
		}
	})
}
