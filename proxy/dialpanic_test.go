package proxy

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A panic while dialing an upstream runs on dialAside's goroutine, which
// no request's recovery covers: it fails the dial, counted in
// gateway_panics_total, instead of ending the process. (Here a TLS
// callback panics during the handshake dial does itself.)
// Not parallel: it counts the process's panics.
func TestDialPanicFailsTheDial(t *testing.T) {
	var open atomic.Int64 // the upstream's connections not yet closed
	up := httptest.NewUnstartedServer(http.NotFoundHandler())
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			open.Add(1)
		case http.StateClosed, http.StateHijacked:
			open.Add(-1)
		}
	}
	up.StartTLS()
	t.Cleanup(up.Close)
	pc := &providerClient{tls: &tls.Config{InsecureSkipVerify: true, VerifyConnection: func(tls.ConnectionState) error {
		panic("a bug in a TLS callback")
	}}}
	before := testutil.ToFloat64(panics)
	c, err := pc.dialAside(up.Listener.Addr().String(), 5*time.Second)
	if c != nil || err == nil || !strings.Contains(err.Error(), "panicked") {
		t.Fatalf("conn %v, err %v: want the dial failed by its panic", c, err)
	}
	if n := testutil.ToFloat64(panics) - before; n != 1 {
		t.Fatalf("gateway_panics_total rose by %v, want 1", n)
	}
	// The socket the handshake ran on is closed, not left to a finalizer.
	deadline := time.Now().Add(10 * time.Second)
	for open.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := open.Load(); n != 0 {
		t.Fatalf("%d upstream connections still open after the dial panicked", n)
	}
}
