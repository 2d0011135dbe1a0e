package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"
)

// Toxiproxy (Shopify's TCP fault proxy) runs in the test process as a
// library: one API server value holds the proxies' shared settings, and each
// test gets its own proxy on a fresh loopback port.
var (
	toxicServerOnce sync.Once
	toxicServer     *toxiproxy.ApiServer
)

// faultProxy is one toxiproxy proxy between the gateway and a dependency.
// Toxics are added and removed while connections are live; they act on the
// links that exist and on new ones.
type faultProxy struct {
	t *testing.T
	p *toxiproxy.Proxy
}

// newFaultProxy starts a proxy from a fresh loopback port to upstream
// (host:port); the test's cleanup stops it and closes its connections.
func newFaultProxy(t *testing.T, name, upstream string) *faultProxy {
	t.Helper()
	toxicServerOnce.Do(func() {
		toxicServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	})
	p := toxiproxy.NewProxy(toxicServer, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("toxiproxy %s: %v", name, err)
	}
	t.Cleanup(p.Stop)
	return &faultProxy{t: t, p: p}
}

// addr is where the proxy listens (host:port).
func (f *faultProxy) addr() string { return f.p.Listen }

// toxic describes one toxic: its type ("latency", "bandwidth", "reset_peer",
// "timeout", "limit_data", ...), the direction it acts on ("downstream":
// dependency to gateway, the default; "upstream": gateway to dependency),
// the share of connections it applies to, and the type's attributes.
type toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream,omitempty"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes"`
}

// add installs tx and returns its name. Toxicity 0 means 1 (every
// connection); a negative toxicity means none.
func (f *faultProxy) add(tx toxic) string {
	f.t.Helper()
	switch {
	case tx.Toxicity == 0:
		tx.Toxicity = 1
	case tx.Toxicity < 0:
		tx.Toxicity = 0
	}
	if tx.Name == "" {
		tx.Name = tx.Type + "_" + tx.Stream
	}
	b, _ := json.Marshal(tx)
	if _, err := f.p.Toxics.AddToxicJson(strings.NewReader(string(b))); err != nil {
		f.t.Fatalf("toxic %s: %v", b, err)
	}
	return tx.Name
}

// resetOnClose makes every connection opened from now on end with a TCP RST
// (SO_LINGER 0) whenever toxiproxy closes it, as reset_peer does: toxiproxy
// sets the linger of a link's sockets when a reset_peer toxic is in its
// chain at the link's start. This one never fires (toxicity 0) and sits on
// the gateway-to-dependency direction; a toxic added later that closes the
// connection (limit_data, reset_peer) then resets the peer mid-body.
func (f *faultProxy) resetOnClose() {
	f.add(toxic{Name: "linger0", Type: "reset_peer", Stream: "upstream", Toxicity: -1,
		Attributes: map[string]any{"timeout": 0}})
}

// remove deletes the named toxic.
func (f *faultProxy) remove(name string) {
	f.t.Helper()
	if err := f.p.Toxics.RemoveToxic(context.Background(), name); err != nil {
		f.t.Fatalf("remove toxic %s: %v", name, err)
	}
}

// down stops the proxy: its listener and every connection through it close,
// so the dependency is unreachable (connection refused) until up.
func (f *faultProxy) down() { f.p.Stop() }

// up starts the proxy again on the same address.
func (f *faultProxy) up() {
	f.t.Helper()
	if err := f.p.Start(); err != nil {
		f.t.Fatalf("toxiproxy restart: %v", err)
	}
}

// leakCheck records the goroutines and open descriptors of the test process
// now; the returned func fails t when goroutines started since are still
// running (after goleak's retries) or more than slack descriptors stayed
// open. Run it when everything the test started has been closed, and only
// where no test runs in parallel with the checked one: both counts are
// process-wide.
//
// Ignored: fasthttp's process-wide helpers (the server date updater, the
// default dialer's address cache cleaner), each HostClient's idle-connection
// cleaner, which sleeps out its MaxIdleConnDuration (90 s in proxy/) once
// its pool is empty and then exits (a connection left open would keep it,
// and shows in the descriptor count), and toxiproxy's own goroutines (a
// latency toxic may stay blocked after its proxy stopped).
func leakCheck(t *testing.T, slack int) func() {
	t.Helper()
	opts := []goleak.Option{goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*TCPDialer).tcpAddrsClean"),
		goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*HostClient).connsCleaner"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*ToxicStub).Run"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).read"),
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2.(*ToxicLink).write"),
	}
	before := openFDs(t)
	return func() {
		t.Helper()
		// goleak retries for about 2 s; give a loaded machine 10 s.
		var err error
		start := time.Now()
		for deadline := start.Add(10 * time.Second); time.Now().Before(deadline); {
			if err = goleak.Find(opts...); err == nil {
				break
			}
			if testing.Verbose() {
				t.Logf("leak check: still running after %v: %v", time.Since(start).Round(time.Millisecond), err)
			}
		}
		if err != nil {
			t.Errorf("goroutines left running: %v", err)
		}
		// Descriptors close a little after their goroutines end (the
		// runtime's netpoller, exec'd children being reaped): poll.
		deadline := time.Now().Add(5 * time.Second)
		for {
			after := openFDs(t)
			if after <= before+slack {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("open descriptors: %d before, %d after (slack %d): %s", before, after, slack, fdList(t))
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// openFDs counts /proc/self/fd (Linux); it skips the test elsewhere.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("needs /proc/self/fd to count descriptors")
	}
	return len(ents)
}

// fdList names what each open descriptor points to, for the failure message.
func fdList(t *testing.T) string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		out = append(out, e.Name()+"→"+l)
	}
	return strings.Join(out, " ")
}

// upstreamConns counts the established TCP connections of this process to
// the fault proxy's port: the gateway's side of its links.
func upstreamConns(t *testing.T, f *faultProxy) int {
	t.Helper()
	_, port, _ := net.SplitHostPort(f.addr())
	return tcpConns(t, port, false)
}

// tcpConns counts this process's established TCP connections whose local
// (server side) or remote (client side) port is port (Linux).
func tcpConns(t *testing.T, port string, local bool) int {
	t.Helper()
	want := fmt.Sprintf(":%04X", mustAtoi(t, port))
	field := 2 // rem_address
	if local {
		field = 1
	}
	n := 0
	for _, file := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			// fields: sl local_address rem_address st ...; st 01 is ESTABLISHED
			if len(fs) > 3 && strings.HasSuffix(fs[field], want) && fs[3] == "01" {
				n++
			}
		}
	}
	return n
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
