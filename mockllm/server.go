package mockllm

import (
	"context"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// Server is a scripted OpenAI-compatible model server. All methods are safe
// for concurrent use.
type Server struct {
	opts    Options // read-only after New
	window  map[string]int
	models  []string
	log     zerolog.Logger
	respond atomic.Pointer[func(*Call) Turn]
	srv     *fasthttp.Server
	created time.Time

	seqCompletion atomic.Uint64
	seqToolCall   atomic.Uint64
	seqRequest    atomic.Uint64

	rec recorder

	done      chan struct{}
	closeOnce sync.Once
}

// New builds a Server; it serves nothing until Serve or ListenLoopback.
func New(opts Options) *Server {
	s := &Server{
		opts:    opts,
		window:  make(map[string]int, len(opts.ContextWindow)),
		done:    make(chan struct{}),
		created: time.Now(),
		log:     zerolog.Nop(),
	}
	if opts.Logger != nil {
		s.log = *opts.Logger
	}
	for m, w := range opts.ContextWindow {
		s.window[m] = w
	}
	s.opts.ContextWindow = nil
	s.models = append([]string(nil), opts.Models...)
	if s.models == nil {
		s.models = append(s.models, "demo")
		for m := range s.window {
			s.models = append(s.models, m)
		}
		sort.Strings(s.models[1:])
	}
	s.rec.init(opts.MaxRecorded)
	s.SetRespond(opts.Respond)
	s.srv = &fasthttp.Server{
		Handler:            s.handle,
		Name:               "mockllm",
		ReadBufferSize:     64 << 10,
		MaxRequestBodySize: 256 << 20,
		CloseOnShutdown:    true,
		// No Date header: fasthttp would start a process-wide ticker goroutine.
		NoDefaultDate:        true,
		NoDefaultContentType: true,
		// The worker-pool cleaner only notices shutdown after this idle period;
		// keep it short so goleak-checked tests see no leftover goroutine.
		MaxIdleWorkerDuration: 100 * time.Millisecond,
		Logger:                fasthttpLogger{s},
	}
	return s
}

// SetRespond swaps the responder at run time; nil restores DemoResponder.
// Requests already being answered keep the responder they started with.
func (s *Server) SetRespond(f func(*Call) Turn) {
	if f == nil {
		f = DemoResponder
	}
	s.respond.Store(&f)
}

// Handler returns the request handler, for mounting on another
// fasthttp.Server. Cancellation after the last write of a stream is only
// detected on connections accepted through Serve.
func (s *Server) Handler() fasthttp.RequestHandler { return s.handle }

// Serve serves on ln until Close. It may be called for several listeners.
func (s *Server) Serve(ln net.Listener) error {
	return s.srv.Serve(trackingListener{ln})
}

// ListenLoopback serves on a fresh 127.0.0.1 port in a new goroutine and
// returns the OpenAI base URL, e.g. "http://127.0.0.1:41234/v1".
func (s *Server) ListenLoopback() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() { _ = s.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/v1", nil
}

// Close stops all listeners, wakes every delayed or stalled stream (they end
// without [DONE]) and waits up to 5s for connections to finish.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = s.srv.ShutdownWithContext(ctx)
	})
	return err
}

// sleep waits d; false when the server is closing.
func (s *Server) sleep(d time.Duration) bool {
	if d <= 0 {
		select {
		case <-s.done:
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.done:
		return false
	}
}

func (s *Server) logFault(kind, model string) {
	s.log.Debug().Str("fault", kind).Str("model", model).Msg("mockllm: injecting fault")
}

// requestID returns a fresh x-request-id value.
func (s *Server) requestID() string {
	return "req_mock_" + strconv.FormatUint(s.seqRequest.Add(1), 10)
}

// fasthttpLogger sends fasthttp's own messages (client resets and the like)
// to the debug log.
type fasthttpLogger struct{ s *Server }

func (l fasthttpLogger) Printf(format string, args ...any) {
	l.s.log.Debug().Msgf("mockllm: fasthttp: "+format, args...)
}
