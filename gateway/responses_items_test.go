package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/internal/testredis"
)

// createItems has tenant key create a response through the native
// pass-through, JSON or streamed, and returns its reasoning and message
// items' ids, as the client reads them: a JSON answer's output; a stream's
// output_item.added events.
func createItems(t *testing.T, base, key string, stream bool) (rs, msg string) {
	t.Helper()
	status, _, body := send(t, "POST", base+"/responses", key, fmt.Sprintf(`{"model":"gpt-x","input":"hi","stream":%v}`, stream))
	if status != 200 {
		t.Fatalf("create (stream %v): %d %s", stream, status, body)
	}
	var ids []string
	if !stream {
		for _, it := range gjson.GetBytes(body, "output").Array() {
			ids = append(ids, it.Get("id").Str)
		}
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if data, ok := strings.CutPrefix(line, "data: "); ok && gjson.Get(data, "type").Str == "response.output_item.added" {
			ids = append(ids, gjson.Get(data, "item.id").Str)
		}
	}
	if len(ids) != 2 || !strings.HasPrefix(ids[0], "rs_") || !strings.HasPrefix(ids[1], "msg_") {
		t.Fatalf("create (stream %v): items %q in %s", stream, ids, body)
	}
	return ids[0], ids[1]
}

// itemsInput is a follow-up naming stored items by id, as the agent SDKs
// send one on a reasoning model's next turn: a reasoning item without its
// encrypted_content, an item_reference, and an item_reference without
// its type.
func itemsInput(rs, msg string) string {
	return `{"model":"gpt-x","input":[{"type":"reasoning","id":"` + rs + `","summary":[]},` +
		`{"type":"item_reference","id":"` + msg + `"},{"id":"` + msg + `"},{"role":"user","content":"and then?"}]}`
}

// The output items of a response a tenant created through a native
// pass-through are that tenant's: its next request naming them by id
// (item_reference, a reasoning item without encrypted_content) goes
// through; another tenant naming them gets the 404 of an unknown item and
// the provider never sees the request. They used to reach the provider,
// which reads every tenant's stored items behind the gateway's one key.
func TestNativeResponseItemsAreTheirTenants(t *testing.T) {
	t.Parallel()
	up := &responsesAPI{}
	h := newOwnerHarness(t, up, "")
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			rs, msg := createItems(t, h.base, "sk-a", stream)
			for _, tc := range []struct{ name, key, body, id string }{
				{"another tenant's items", "sk-b", itemsInput(rs, msg), msg},
				{"another tenant's reasoning", "sk-b", `{"model":"gpt-x","input":[{"type":"reasoning","id":"` + rs + `","summary":[],"encrypted_content":null}]}`, rs},
				{"another tenant's reference", "sk-b", `{"model":"gpt-x","input":[{"type":"item_reference","id":"` + msg + `"}]}`, msg},
				{"another tenant's reference without a type", "sk-b", `{"model":"gpt-x","input":[{"id":"` + msg + `","type":null}]}`, msg},
				{"an id never recorded", "sk-a", itemsInput(rs, "msg_madeup"), "msg_madeup"},
				{"a response's id", "sk-a", itemsInput(rs, createResponse(t, h.base, "sk-a", stream)), "resp_"},
			} {
				before := up.seen()
				status, _, body := send(t, "POST", h.base+"/responses", tc.key, tc.body)
				if status != 404 || gjson.GetBytes(body, "error.code").Str != "item_not_found" ||
					gjson.GetBytes(body, "error.param").Str != "input" || !strings.Contains(gjson.GetBytes(body, "error.message").Str, tc.id) {
					t.Fatalf("%s: %d %s, want 404 item_not_found naming %s", tc.name, status, body, tc.id)
				}
				if up.seen() != before {
					t.Fatalf("%s: the provider got the refused request", tc.name)
				}
			}
			before := up.seen()
			if status, _, body := send(t, "POST", h.base+"/responses", "sk-a", itemsInput(rs, msg)); status != 200 {
				t.Fatalf("tenant a names its own items: %d %s", status, body)
			}
			// A reasoning item with its encrypted_content is read from it,
			// not fetched: anyone's id goes.
			enc := `{"model":"gpt-x","input":[{"type":"reasoning","id":"` + rs + `","summary":[],"encrypted_content":"gAAA"},{"type":"message","id":"` + msg + `","role":"assistant","content":[]}]}`
			if status, _, body := send(t, "POST", h.base+"/responses", "sk-b", enc); status != 200 {
				t.Fatalf("tenant b sends items read from the request: %d %s", status, body)
			}
			if n := up.seen() - before; n != 2 {
				t.Fatalf("the provider got %d of the 2 requests allowed", n)
			}
		})
	}
}

// The output items of a response read back or cancelled by the tenant
// that created it (one made in the background has its items only then)
// are that tenant's too.
func TestNativeResponseItemsReadBackAreTheirTenants(t *testing.T) {
	t.Parallel()
	up := &responsesAPI{}
	h := newOwnerHarness(t, up, "")
	for _, tc := range []struct{ method, sub string }{{"GET", ""}, {"POST", "/cancel"}} {
		id := createResponse(t, h.base, "sk-a", false)
		status, _, body := send(t, tc.method, h.base+"/responses/"+id+tc.sub, "sk-a", "")
		item := gjson.GetBytes(body, "output.0.id").Str
		if status != 200 || !strings.HasPrefix(item, "msg_of_") {
			t.Fatalf("%s %s: %d %s", tc.method, tc.sub, status, body)
		}
		ref := `{"model":"gpt-x","input":[{"type":"item_reference","id":"` + item + `"}]}`
		if status, _, body := send(t, "POST", h.base+"/responses", "sk-b", ref); status != 404 {
			t.Fatalf("%s %s: tenant b names a's item: %d %s, want 404", tc.method, tc.sub, status, body)
		}
		if status, _, body := send(t, "POST", h.base+"/responses", "sk-a", ref); status != 200 {
			t.Fatalf("%s %s: tenant a names its own item: %d %s", tc.method, tc.sub, status, body)
		}
	}
	// A deletion's answer records nothing.
	id := createResponse(t, h.base, "sk-a", false)
	if status, _, body := send(t, "DELETE", h.base+"/responses/"+id, "sk-a", ""); status != 200 {
		t.Fatalf("delete: %d %s", status, body)
	}
	ref := `{"model":"gpt-x","input":[{"type":"item_reference","id":"msg_of_` + id + `"}]}`
	if status, _, body := send(t, "POST", h.base+"/responses", "sk-a", ref); status != 404 {
		t.Fatalf("an item of a deletion's answer: %d %s, want 404", status, body)
	}
}

// Input items the gateway and a lenient provider might read differently,
// or too many to look up, are refused before they go upstream.
func TestNativeResponseItemsRefuseWhatTheyCannotScope(t *testing.T) {
	t.Parallel()
	up := &responsesAPI{}
	h := newOwnerHarness(t, up, "")
	rs, msg := createItems(t, h.base, "sk-a", false)
	var many strings.Builder
	many.WriteString(`{"model":"gpt-x","input":[`)
	for i := range 1025 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `{"type":"item_reference","id":"%s"}`, msg)
	}
	many.WriteString(`]}`)
	before := up.seen()
	for _, tc := range []struct{ name, body string }{
		{"an id not a string", `{"model":"gpt-x","input":[{"type":"item_reference","id":["` + msg + `"]}]}`},
		{"a second id", `{"model":"gpt-x","input":[{"type":"item_reference","id":"` + msg + `","id":"msg_theirs"}]}`},
		{"an id in another case", `{"model":"gpt-x","input":[{"type":"reasoning","id":"` + rs + `","ID":"rs_theirs","summary":[]}]}`},
		{"an escaped type", `{"model":"gpt-x","input":[{"type":"message","typ\u0065":"item_reference","id":"msg_theirs"}]}`},
		{"a second encrypted_content", `{"model":"gpt-x","input":[{"type":"reasoning","id":"rs_theirs","encrypted_content":"x","Encrypted_Content":null}]}`},
		{"a type not a string", `{"model":"gpt-x","input":[{"type":["item_reference"],"id":"msg_theirs"}]}`},
		{"a second input", `{"model":"gpt-x","input":"hi","input":[{"type":"item_reference","id":"msg_theirs"}]}`},
		{"too many", many.String()},
	} {
		status, _, body := send(t, "POST", h.base+"/responses", "sk-a", tc.body)
		if status != 400 {
			t.Errorf("%s: %d %s, want 400", tc.name, status, body)
		}
	}
	if n := up.seen(); n != before {
		t.Fatalf("the provider got %d of the refused requests", n-before)
	}
	// As many as the bound, all the tenant's own: one lookup, through.
	within := strings.Replace(many.String(), `{"type":"item_reference","id":"`+msg+`"},`, "", 1)
	if status, _, body := send(t, "POST", h.base+"/responses", "sk-a", within); status != 200 {
		t.Fatalf("1024 references to its own item: %d %s", status, body)
	}
}

// Replicas sharing Redis agree on whose output items are whose: recorded
// through one gateway, they are named through the other by their tenant
// and refused there to another, whatever the store of the gateway's own
// responses.
func TestNativeResponseItemsAcrossReplicas(t *testing.T) {
	t.Parallel()
	addr := testredis.Start(t).Addr()
	for _, store := range []string{"redis", "memory", "none"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			extra := "\n[responses]\nstore = \"" + store + "\"\n[redis]\naddr = \"" + addr + "\"\nprefix = \"items-test-" + store + ":\"\n"
			up := &responsesAPI{}
			one, two := newOwnerHarness(t, up, extra), newOwnerHarness(t, up, extra)
			for _, stream := range []bool{false, true} {
				rs, msg := createItems(t, one.base, "sk-a", stream)
				if status, _, body := send(t, "POST", two.base+"/responses", "sk-b", itemsInput(rs, msg)); status != 404 {
					t.Fatalf("stream %v: tenant b on the other replica: %d %s, want 404", stream, status, body)
				}
				if status, _, body := send(t, "POST", two.base+"/responses", "sk-a", itemsInput(rs, msg)); status != 200 {
					t.Fatalf("stream %v: tenant a on the other replica: %d %s", stream, status, body)
				}
			}
		})
	}
}
