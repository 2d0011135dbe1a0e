package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/jsonvalid"
	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/responses"
)

// itemTapAll feeds body to a new item tap in pieces of at most piece
// bytes and returns the ids it gave to record, in order.
func itemTapAll(sse bool, body []byte, piece int) []string {
	t := newItemTap(sse)
	var ids []string
	for len(body) > 0 {
		n := min(piece, len(body))
		ids = append(ids, t.write(body[:n])...)
		body = body[n:]
	}
	return ids
}

// The tap finds the ids of an answer's output items, as a JSON reader
// would read them, however the answer is cut into reads: only top-level
// output items (of a JSON answer whose object is "response"; of an
// event's item or response), each once.
func TestItemTap(t *testing.T) {
	t.Parallel()
	item := func(id string) string {
		return `{"id":"` + id + `","type":"message","content":[{"type":"output_text","id":"not_me","text":"}{\"id\":\"evil\""}]}`
	}
	for _, tc := range []struct {
		name string
		sse  bool
		body string
		want []string
	}{
		{"json", false, `{"id":"resp_1","object":"response","output":[` + item("msg_1") + `,{"type":"reasoning","id":"rs_1","summary":[]}]}`, []string{"msg_1", "rs_1"}},
		{"output before object", false, `{"output":[{"id":"msg_2"}],"id":"resp_2","object":"response"}`, []string{"msg_2"}},
		{"another object", false, `{"object":"list","data":[],"output":[{"id":"msg_3"}]}`, nil},
		{"no object", false, `{"output":[{"id":"msg_3"}]}`, nil},
		{"an escaped object", false, `{"object":"respons\u0065","output":[{"id":"msg_3"}]}`, nil},
		{"object not a string", false, `{"object":["response"],"output":[{"id":"msg_3"}]}`, nil},
		{"the first output", false, `{"object":"response","output":[{"id":"msg_4"}],"output":[{"id":"msg_no"}]}`, []string{"msg_4"}},
		{"the first id", false, `{"object":"response","output":[{"id":"msg_5","id":"msg_no"},{"x":{"id":"no"},"id":"msg_6"}]}`, []string{"msg_5", "msg_6"}},
		{"nested outputs", false, `{"object":"response","x":{"output":[{"id":"no"}]},"output":[[{"id":"no"}],"s",{"id":7},{"id":"msg_7"}]}`, []string{"msg_7"}},
		{"an escaped id", false, `{"object":"response","output":[{"id":"msg_\u0038"},{"id":"msg_9"}]}`, []string{"msg_9"}},
		{"an escaped key gives up", false, `{"object":"response","output":[{"id":"msg_10"},{"\u0069d":"x","id":"msg_no"}]}`, []string{"msg_10"}},
		{"an id too long", false, `{"object":"response","output":[{"id":"` + strings.Repeat("x", 200) + `"}]}`, nil},
		{"repeated ids", false, `{"object":"response","output":[{"id":"a"},{"id":"a"}]}`, []string{"a"}},
		{"events", true, "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"output\":[]}}\n\n" +
			"data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"rs_1\",\"type\":\"reasoning\"}}\n\n" +
			"data: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_no\",\"delta\":\"{\\\"item\\\":{\\\"id\\\":\\\"x\\\"}}\"}\n\n" +
			"data:{\"type\":\"response.output_item.done\",\"item\":{\"id\":\"rs_1\"}}\r\n\r\n" +
			"data: {\"type\":\"response.completed\",\"response\":{\"id\":\"resp_1\",\"output\":[{\"id\":\"rs_1\"},{\"id\":\"msg_1\"}]}}\n\n", []string{"rs_1", "msg_1"}},
		{"not a data line", true, ": {\"item\":{\"id\":\"no\"}}\nevent: {\"item\":{\"id\":\"no\"}}\n\n", nil},
		{"an item nested deeper", true, "data: {\"x\":{\"item\":{\"id\":\"no\"}},\"response\":{\"x\":{\"output\":[{\"id\":\"no\"}]}}}\n\n", nil},
		{"a line past an escaped key", true, "data: {\"\\u0069tem\":{\"id\":\"no\"},\"item\":{\"id\":\"no\"}}\ndata: {\"item\":{\"id\":\"msg_2\"}}\n", []string{"msg_2"}},
		{"done", true, "data: [DONE]\n\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, piece := range []int{1, 2, 3, 7, len(tc.body)} {
				if got := itemTapAll(tc.sse, []byte(tc.body), piece); !slices.Equal(got, tc.want) {
					t.Fatalf("in pieces of %d: %q, want %q", piece, got, tc.want)
				}
			}
		})
	}
}

// gjsonItems is what a JSON reader reads as the output items' ids of an
// answer: itemTap's ids, unescaped, unbounded.
func gjsonItems(sse bool, body []byte) (ids []string, valid bool) {
	add := func(output gjson.Result) {
		if !output.IsArray() {
			return
		}
		output.ForEach(func(_, it gjson.Result) bool {
			if id := it.Get("id"); it.IsObject() && id.Type == gjson.String && id.Str != "" && len(id.Str) <= maxScanValue && !slices.Contains(ids, id.Str) {
				ids = append(ids, id.Str)
			}
			return true
		})
	}
	if !sse {
		if !jsonvalid.Bytes(body) {
			return nil, false
		}
		root := gjson.ParseBytes(body)
		if obj := root.Get("object"); root.IsObject() && obj.Type == gjson.String && obj.Str == "response" {
			add(root.Get("output"))
		}
		return ids, true
	}
	for line := range bytes.SplitSeq(body, []byte("\n")) {
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		if !jsonvalid.Bytes(data) {
			return nil, false
		}
		ev := gjson.ParseBytes(data)
		if !ev.IsObject() {
			continue
		}
		if it := ev.Get("item"); it.IsObject() {
			add(gjson.Parse("[" + it.Raw + "]"))
		}
		if r := ev.Get("response"); r.IsObject() {
			add(r.Get("output"))
		}
	}
	return ids, true
}

// The tap never panics, finds the same ids however the answer is cut, at
// most responses.MaxItems of them, each once; in a well-formed answer it
// finds only what a JSON reader reads there, and all of it when no
// escape can hide a name.
func FuzzItemTap(f *testing.F) {
	f.Add([]byte(`{"id":"resp_1","object":"response","output":[{"id":"msg_1","content":[{"id":"x"}]},{"id":"rs_1"}]}`), uint8(3), false)
	f.Add([]byte(`{"output":[{"id":"m"}],"object":"response","id":"resp_2"}`), uint8(1), false)
	f.Add([]byte(`{"a":"\"}{","object":"response","output":[{"\u0069d":"x"}]}`), uint8(5), false)
	f.Add([]byte("data: {\"item\":{\"id\":\"rs_4\"}}\n\ndata: {\"response\":{\"output\":[{\"id\":\"msg_4\"}]}}\n"), uint8(2), true)
	f.Add([]byte("event: x\r\ndata:{\"x\":[{]}\ndata: {\"item\":{\"id\":\"rs_5\",\"id\":\"no\"}}\r\n"), uint8(4), true)
	f.Fuzz(func(t *testing.T, body []byte, piece uint8, sse bool) {
		ids := itemTapAll(sse, body, len(body)+1)
		ids2 := itemTapAll(sse, body, int(piece)+1)
		if !slices.Equal(ids, ids2) {
			t.Fatalf("whole: %q; in pieces of %d: %q", ids, int(piece)+1, ids2)
		}
		if len(ids) > responses.MaxItems {
			t.Fatalf("%d ids", len(ids))
		}
		for i, id := range ids {
			if id == "" || len(id) > maxScanValue || slices.Contains(ids[:i], id) {
				t.Fatalf("found %q among %q", id, ids)
			}
		}
		want, valid := gjsonItems(sse, body)
		if !valid {
			return
		}
		for _, id := range ids {
			if !slices.Contains(want, id) {
				t.Fatalf("found %q; a JSON reader reads %q", id, want)
			}
		}
		if !bytes.Contains(body, []byte{'\\'}) && len(want) <= responses.MaxItems && !slices.Equal(ids, want) {
			t.Fatalf("found %q; a JSON reader reads %q", ids, want)
		}
	})
}

// An answer with more output items than responses.MaxItems records the
// first MaxItems of them, not the rest; a JSON answer whose items come
// before its object holds its bytes from the first item on (never more
// than maxOwnerHold of them), and past that records none of them.
func TestOwnerRecordItemBounds(t *testing.T) {
	t.Parallel()
	s := &Server{base: context.Background(), log: zerolog.Nop()}
	var many strings.Builder
	many.WriteString(`{"id":"resp_1","object":"response","output":[`)
	for i := range responses.MaxItems + 10 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `{"id":"msg_%d"}`, i)
	}
	many.WriteString(`]}`)
	for _, tc := range []struct {
		name, body string
		recorded   []string
		not        []string
	}{
		{"over the bound", many.String(), []string{"msg_0", fmt.Sprintf("msg_%d", responses.MaxItems-1)}, []string{fmt.Sprintf("msg_%d", responses.MaxItems)}},
		{"items before the object", `{"output":[{"id":"msg_a"}],"status":"completed","object":"response","id":"resp_1"}`, []string{"msg_a"}, nil},
		// Read whole, the answer is recorded before any of it goes out.
		{"items far before the object", `{"output":[{"id":"msg_a"}],"pad":"` + strings.Repeat("x", 2*maxOwnerHold) + `","object":"response","output":[{"id":"msg_b"}]}`, nil, []string{"msg_a", "msg_b"}},
	} {
		for _, piece := range []int{1, 7, 4096, len(tc.body)} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, piece), func(t *testing.T) {
				t.Parallel()
				owners := &responses.Owners{KV: responses.NewMemoryKV(1 << 30)}
				r := &ownerRecord{tap: newOwnerTap([]byte("application/json")), items: newItemTap(false), owners: owners, tenant: "t"}
				var out []byte
				body := []byte(tc.body)
				for len(body) > 0 {
					n := min(piece, len(body))
					out = append(out, r.pass(s, body[:n], n == len(body))...)
					if len(r.held) > maxOwnerHold {
						t.Fatalf("%d bytes held", len(r.held))
					}
					body = body[n:]
				}
				if string(out) != tc.body {
					t.Fatalf("relayed %d bytes, not the answer's %d as they came", len(out), len(tc.body))
				}
				for _, id := range tc.recorded {
					if _, ok, _ := owners.OwnsItems(context.Background(), "t", []string{id}); !ok {
						t.Errorf("%s not recorded", id)
					}
				}
				for _, id := range tc.not {
					if piece == len(tc.body) && strings.HasPrefix(tc.name, "items far") {
						break
					}
					if _, ok, _ := owners.OwnsItems(context.Background(), "t", []string{id}); ok {
						t.Errorf("%s recorded", id)
					}
				}
			})
		}
	}
}

// itemGatedKV is an owner KV whose Set of an item's record reports its
// key, then waits until release is closed; other records are kept at once.
type itemGatedKV struct {
	set     chan string
	release chan struct{}
}

var _ responses.KV = (*itemGatedKV)(nil)

func (k *itemGatedKV) Get(context.Context, string) ([]byte, bool, error) { return nil, false, nil }
func (k *itemGatedKV) Delete(context.Context, string) error              { return nil }
func (k *itemGatedKV) Set(_ context.Context, key string, _ []byte, _ time.Duration) error {
	if strings.HasPrefix(key, "item:") {
		k.set <- key
		<-k.release
	}
	return nil
}

// The ids of a pass-through answer's output items are recorded before the
// bytes that carry them reach the client: while an item's record is being
// written, the client has none of them, also when a JSON answer's items
// come before its object, in an earlier read.
func TestPassthroughRecordsItemsBeforeRelayingThem(t *testing.T) {
	t.Parallel()
	const id = "rs_gated1"
	for _, tc := range []struct{ name, ct, body, later string }{
		{"json", "application/json", `{"id":"resp_1","object":"response","status":"completed","output":[{"id":"` + id + `","type":"reasoning","summary":[]}]}`, ""},
		{"stream", "text/event-stream", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"resp_1\",\"output\":[]}}\n\n" +
			"event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"" + id + "\",\"type\":\"reasoning\"}}\n\n", ""},
		{"json, the object in a later read", "application/json", `{"output":[{"id":"` + id + `","type":"reasoning"}],`, `"id":"resp_1","object":"response"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			later := make(chan struct{})
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", tc.ct)
				_, _ = io.WriteString(w, tc.body)
				if tc.later != "" {
					w.(http.Flusher).Flush()
					<-later
					_, _ = io.WriteString(w, tc.later)
				}
			}))
			t.Cleanup(up.Close)
			cfg, u := testUpstream(t, up.URL+"/v1", "")
			kv := &itemGatedKV{set: make(chan string, 1), release: make(chan struct{})}
			routes := map[string]*pipeline.Route{"m": {Name: "m", Deployments: []pipeline.Target{{Provider: "p", Upstream: "up"}}}}
			rt := &Runtime{Config: cfg, Routes: routes, Upstream: u, Policy: &meterPolicy{done: make(chan struct{})},
				ResponseOwners: &responses.Owners{KV: kv}}
			srv := NewServer(rt, zerolog.Nop())
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = srv.Serve(ln) }()
			t.Cleanup(func() { _ = ln.Close() })
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			body := `{"model":"m","input":"x"}`
			fmt.Fprintf(conn, "POST /v1/responses HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)

			var got strings.Builder
			read := func() {
				_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				_, _ = io.Copy(&got, conn)
			}
			if tc.later != "" {
				read()
				if strings.Contains(got.String(), id) {
					close(later)
					close(kv.release)
					t.Fatalf("the client had the item's id before the answer's object was read: %q", got.String())
				}
				close(later)
			}
			select {
			case key := <-kv.set:
				if key != "item:t\x00"+id {
					t.Fatalf("recorded %q", key)
				}
			case <-time.After(10 * time.Second):
				close(kv.release)
				t.Fatal("the item was never recorded")
			}
			read()
			close(kv.release)
			if strings.Contains(got.String(), id) {
				t.Fatalf("the client had the item's id before it was recorded: %q", got.String())
			}
			for end := time.Now().Add(5 * time.Second); !strings.Contains(got.String(), id) && time.Now().Before(end); {
				read()
			}
			if !strings.Contains(got.String(), id) {
				t.Fatalf("the client never got the item's id: %q", got.String())
			}
		})
	}
}

// A JSON answer whose object comes more than maxOwnerHold bytes after its
// id (an upstream that writes long instructions between them) goes out
// before the object is known; its output items come after the object and
// are recorded before the bytes that carry them go out.
func TestOwnerRecordItemsAfterALateObject(t *testing.T) {
	t.Parallel()
	s := &Server{base: context.Background(), log: zerolog.Nop()}
	body := `{"id":"resp_1","instructions":"` + strings.Repeat("x", 2*maxOwnerHold) + `","object":"response","output":[{"id":"msg_after"}]}`
	owners := &responses.Owners{KV: responses.NewMemoryKV(1 << 30)}
	r := &ownerRecord{tap: newOwnerTap([]byte("application/json")), items: newItemTap(false), owners: owners, tenant: "t"}
	for b := []byte(body); len(b) > 0; {
		n := min(4096, len(b))
		r.pass(s, b[:n], n == len(b))
		b = b[n:]
	}
	resp, err := owners.Owns(context.Background(), "t", "resp_1")
	if err != nil {
		t.Fatal(err)
	}
	_, item, err := owners.OwnsItems(context.Background(), "t", []string{"msg_after"})
	if err != nil {
		t.Fatal(err)
	}
	if !resp || !item {
		t.Fatalf("response recorded %v, its output item after the late object recorded %v; want both", resp, item)
	}
}
