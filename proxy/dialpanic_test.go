package proxy

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"strings"
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
	up := httptest.NewTLSServer(http.NotFoundHandler())
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
}
