package proxy

import (
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/observe"
)

// acceptErrors counts the failed accepts the listener waited out.
var acceptErrors = observe.Factory.NewCounter(prometheus.CounterOpts{
	Name: "gateway_accept_errors_total",
	Help: "Failed accepts of new connections (out of file descriptors, a connection aborted before it was accepted), each waited out and retried.",
})

// retryListener waits out a failed accept and tries again, as net/http's
// server does, instead of handing fasthttp the error: fasthttp retries
// only timeouts and ends Serve on any other, so a process out of file
// descriptors (EMFILE: anyone who can open connections can get it there)
// stopped serving, and the gateway exited. Only a closed listener ends
// Accept.
type retryListener struct {
	net.Listener
	log    *zerolog.Logger
	logged atomic.Int64 // Unix ns of the last failure logged: one line per acceptLogEvery
}

// acceptLogEvery bounds the log lines of failed accepts: at the descriptor
// limit, every descriptor freed lets one accept through and the next fail.
const acceptLogEvery = 10 * time.Second

// Accept waits 5 ms after a failed accept, doubling up to a second, until
// one succeeds.
func (l *retryListener) Accept() (net.Conn, error) {
	var wait time.Duration
	for {
		c, err := l.Listener.Accept()
		if err == nil {
			return c, nil
		}
		if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) {
			return nil, err
		}
		acceptErrors.Inc()
		if now, last := time.Now().UnixNano(), l.logged.Load(); now-last >= int64(acceptLogEvery) && l.logged.CompareAndSwap(last, now) {
			l.log.Error().Err(err).Msg("accepting a connection failed; retrying (out of file descriptors? raise the limit, or bound the connections in front); gateway_accept_errors_total counts every one")
		}
		wait = min(max(2*wait, 5*time.Millisecond), time.Second)
		time.Sleep(wait)
	}
}
