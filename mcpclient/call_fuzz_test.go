package mcpclient

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// FuzzResultData: any tools/call result an MCP server sends, decoded as the
// SDK decodes it, maps to data without panicking. Structured content is
// valid JSON; the text of the blocks is valid UTF-8 (the SDK's decoder
// makes every string so), is exactly the texts joined by newlines when
// every block is text (leading empty ones add no newline), and never inlines a binary block: it is no longer
// than the blocks' strings plus a bounded note per block.
func FuzzResultData(f *testing.F) {
	f.Add([]byte(`{"content":[{"type":"text","text":"hello"},{"type":"text","text":"world"}]}`))
	f.Add([]byte(`{"content":[{"type":"text","text":"{\"a\":1}"}],"structuredContent":{"a":1}}`))
	f.Add([]byte(`{"content":[{"type":"image","mimeType":"image/png","data":"aGVsbG8gd29ybGQ="},{"type":"audio","mimeType":"audio/wav","data":"AAAA"}]}`))
	f.Add([]byte(`{"content":[{"type":"resource_link","uri":"file:///x","name":"x","description":"d"},{"type":"resource","resource":{"uri":"file:///y","text":"t"}},{"type":"resource","resource":{"uri":"file:///z","blob":"AAEC"}}]}`))
	f.Add([]byte(`{"content":[{"type":"resource"}],"isError":true}`))
	f.Add([]byte(`{"content":[{"type":"tool_use","id":"u","name":"n","input":{}},{"type":"tool_result","toolUseId":"u","content":[{"type":"text","text":"x"}]}]}`))
	f.Add([]byte(`{"content":[{"type":"text","text":"\ud800 bad ` + "\xff\xfe" + `"}],"structuredContent":[1,"\ud800",null,1e308]}`))
	f.Add([]byte(`{"content":[],"structuredContent":"s"}`))
	f.Add([]byte(`{"content":null,"structuredContent":null}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var res mcp.CallToolResult
		if json.Unmarshal(raw, &res) != nil {
			return
		}
		data := resultData(&res)
		if res.StructuredContent != nil {
			if _, err := json.Marshal(res.StructuredContent); err == nil && !json.Valid(data) {
				t.Fatalf("structured content %q mapped to invalid JSON %q", raw, data)
			}
		}
		text := contentText(res.Content)
		if !utf8.ValidString(text) {
			t.Fatalf("result %q: text is not valid UTF-8: %q", raw, text)
		}
		allText, bound := true, 0
		var texts []string
		for _, c := range res.Content {
			bound += 64 // newline and the note's punctuation and size
			switch v := c.(type) {
			case *mcp.TextContent:
				texts = append(texts, v.Text)
				bound += len(v.Text)
				continue
			case *mcp.ImageContent:
				bound += len(v.MIMEType)
			case *mcp.AudioContent:
				bound += len(v.MIMEType)
			case *mcp.ResourceLink:
				bound += len(v.URI) + len(v.Description)
			case *mcp.EmbeddedResource:
				if v.Resource != nil {
					bound += len(v.Resource.Text) + len(v.Resource.URI)
				}
			}
			allText = false
		}
		if len(text) > bound {
			t.Fatalf("result %q: %d bytes of text for blocks whose strings bound it to %d: %q", raw, len(text), bound, text)
		}
		for len(texts) > 0 && texts[0] == "" {
			texts = texts[1:] // a separator follows the first text that is not empty
		}
		if allText && text != strings.Join(texts, "\n") {
			t.Fatalf("text blocks %q joined to %q", texts, text)
		}
	})
}

// FuzzRPCMessage: any JSON-RPC error response a server sends, decoded as
// the SDK decodes it, gives the model a message of valid UTF-8 within
// maxRPCMessage bytes (and the ellipsis), never empty.
func FuzzRPCMessage(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params: widget not found"}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":""}}`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"` + strings.Repeat("é", 600) + "\xff" + `"}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		msg, err := jsonrpc.DecodeMessage(raw)
		resp, ok := msg.(*jsonrpc.Response)
		if err != nil || !ok || resp.Error == nil {
			return
		}
		we := rpcError(fmt.Errorf("calling %q: %w", "tools/call", resp.Error))
		if we == nil {
			return // a code the SDK uses for its own failures
		}
		out := rpcMessage(we)
		if len(out) == 0 || len(out) > maxRPCMessage+len("…") || !utf8.Valid(out) {
			t.Fatalf("message of %d bytes: %q", len(out), out)
		}
	})
}
