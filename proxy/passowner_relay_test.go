package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/pipeline"
	"github.com/llmgw/gateway/responses"
)

// gatedKV is an owner KV whose Set reports its key on set, then waits
// until release is closed.
type gatedKV struct {
	set     chan string
	release chan struct{}
}

var _ responses.KV = (*gatedKV)(nil)

func (k *gatedKV) Get(context.Context, string) ([]byte, bool, error) { return nil, false, nil }
func (k *gatedKV) Delete(context.Context, string) error              { return nil }
func (k *gatedKV) Set(_ context.Context, key string, _ []byte, _ time.Duration) error {
	k.set <- key
	<-k.release
	return nil
}

// The id of the response a pass-through POST /v1/responses creates is
// recorded before the bytes that carry it reach the client: while the
// record is being written, the client has none of them, also when a JSON
// answer's object, without which it is not recorded, comes in a later
// read than its id. A client that sends its follow-up as soon as it reads
// the id finds the record.
func TestPassthroughRecordsTheOwnerBeforeRelayingTheID(t *testing.T) {
	t.Parallel()
	const id = "resp_gated1"
	for _, tc := range []struct{ name, ct, body, later string }{
		{"json", "application/json", `{"id":"` + id + `","object":"response","status":"completed","output":[]}`, ""},
		{"stream", "text/event-stream", "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"" + id + "\",\"object\":\"response\"}}\n\n", ""},
		{"json, the object in a later read", "application/json", `{"status":"completed","id":"` + id + `",`, `"object":"response","output":[]}`},
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
			kv := &gatedKV{set: make(chan string, 1), release: make(chan struct{})}
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

			// got reads what reaches the client in a moment.
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
					t.Fatalf("the client had the id before its object was read: %q", got.String())
				}
				close(later)
			}
			select {
			case key := <-kv.set:
				if key != "own:t\x00"+id {
					t.Fatalf("recorded %q", key)
				}
			case <-time.After(10 * time.Second):
				close(kv.release)
				t.Fatal("the owner was never recorded")
			}
			// While the record is being written: whatever reached the
			// client, none of it is the id.
			read()
			close(kv.release)
			if strings.Contains(got.String(), id) {
				t.Fatalf("the client had the id before its owner was recorded: %q", got.String())
			}
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			rest, _ := bufio.NewReader(conn).ReadString('}')
			if !strings.Contains(got.String()+rest, id) {
				t.Fatalf("the client never got the id: %q", got.String()+rest)
			}
		})
	}
}

// ownerRecord.pass lets every byte out once, in order, however the answer
// is cut; it holds a JSON answer's bytes from its id on until the object
// is read, never more than maxOwnerHold of them (past that they go out,
// and the id is still recorded when the object comes).
func TestOwnerRecordPass(t *testing.T) {
	t.Parallel()
	s := &Server{base: context.Background(), log: zerolog.Nop()}
	for _, tc := range []struct {
		name, body string
		maxHeld    int
	}{
		{"object after the id", `{"id":"resp_1","status":"completed","object":"response","output":[]}`, maxOwnerHold},
		{"no object", `{"id":"resp_1","status":"completed","output":[]}`, maxOwnerHold},
		{"object far after the id", `{"id":"resp_1","pad":"` + strings.Repeat("x", maxOwnerHold+10) + `","object":"response"}`, maxOwnerHold},
	} {
		for _, piece := range []int{1, 7, 4096, len(tc.body)} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, piece), func(t *testing.T) {
				t.Parallel()
				owners := &responses.Owners{KV: responses.NewMemoryKV(1 << 20)}
				r := &ownerRecord{tap: newOwnerTap([]byte("application/json")), items: newItemTap(false), owners: owners, tenant: "t"}
				var out []byte
				body := []byte(tc.body)
				for len(body) > 0 {
					n := min(piece, len(body))
					out = append(out, r.pass(s, body[:n], n == len(body))...)
					if len(r.held) > tc.maxHeld {
						t.Fatalf("%d bytes held", len(r.held))
					}
					body = body[n:]
				}
				if string(out) != tc.body {
					t.Fatalf("relayed %d bytes, not the answer's %d as they came", len(out), len(tc.body))
				}
				owns, _ := owners.Owns(context.Background(), "t", "resp_1")
				if want := strings.Contains(tc.body, `"object":"response"`); owns != want {
					t.Fatalf("recorded %v, want %v", owns, want)
				}
			})
		}
	}
}
