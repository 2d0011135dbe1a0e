package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/llmgw/gateway/config"
)

// server is the connection to one MCP server, driven by run.
type server struct {
	m       *Manager
	cfg     config.MCPServer
	timeout time.Duration
	client  *mcp.Client
	changed chan struct{}           // tools/list_changed, coalesced
	probe   chan struct{}           // a call failed at the transport: ping now
	stuck   chan *mcp.ClientSession // a call is blocked past its deadline on this session: end it
	broken  chan *mcp.ClientSession // an answer over the bound broke this session: end it

	// upGauge and toolsGauge are the server's series, resolved once: once
	// the last Manager holding them let go (serverHolders), a late setDown
	// sets a child no longer registered instead of adding the series back.
	upGauge, toolsGauge prometheus.Gauge

	mu      sync.Mutex
	session *mcp.ClientSession // nil while down
	up      chan struct{}      // closed (and replaced) when a session comes up
	failed  chan struct{}      // closed when an attempt fails; replaced when a session comes up
	tools   []*Tool
	// offered are the names of the tools the server last listed, kept
	// while it is down: a name it offers stays its (publish), so that a
	// later server's tool of the same name never stands in for it. listed:
	// it has listed them once (before, its names are unknown).
	offered []string
	listed  bool
	state   string
}

func newServer(m *Manager, cfg config.MCPServer) *server {
	s := &server{m: m, cfg: cfg, timeout: cfg.Timeout.D(), state: "down: connecting",
		changed: make(chan struct{}, 1), probe: make(chan struct{}, 1), stuck: make(chan *mcp.ClientSession, 1),
		broken: make(chan *mcp.ClientSession, 1), up: make(chan struct{}), failed: make(chan struct{})}
	s.client = mcp.NewClient(&mcp.Implementation{Name: "llmgw-gateway", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{}, // no roots, sampling or elicitation: the gateway has no user to ask
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			signal(s.changed)
		},
		KeepAlive: m.opts.KeepAlive,
	})
	serverHolders.Hold(cfg.Name) // let go when run ends
	s.upGauge, s.toolsGauge = metricUp.WithLabelValues(cfg.Name), metricTools.WithLabelValues(cfg.Name)
	s.upGauge.Set(0)
	return s
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *server) status() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

func (s *server) currentTools() []*Tool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools
}

// offeredNames returns the names of the tools the server last listed, up
// or down (never modified: setUp replaces it), and whether it has listed.
func (s *server) offeredNames() ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offered, s.listed
}

func (s *server) current() *mcp.ClientSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.session
}

// run connects, lists, waits, and reconnects with backoff until ctx ends.
// first is called once the first attempt is over, whatever its outcome.
func (s *server) run(ctx context.Context, first func()) {
	backoff := s.m.opts.MinBackoff
	defer serverHolders.Release(s.cfg.Name) // after setDown: a server a reload removed leaves the metrics
	defer s.setDown("down: closed", nil)
	for {
		err := s.connectOnce(ctx, first)
		first()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = s.m.opts.MinBackoff // it was up: retry soon
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(backoff*2, s.m.opts.MaxBackoff)
	}
}

// connectOnce runs one connection from connect to its end. It returns nil
// when the connection was up (and has now ended), else the connect error.
func (s *server) connectOnce(ctx context.Context, first func()) error {
	log := s.m.log.With().Str("mcp_server", s.cfg.Name).Logger()
	tr := transport(&s.cfg)
	cctx, cancel := context.WithTimeout(ctx, s.connectTimeout())
	sess, err := s.client.Connect(cctx, tr, nil)
	if err != nil {
		cancel()
		reapStdio(tr)
		metricConnects.WithLabelValues(s.cfg.Name, "error").Inc()
		s.setDown("down: connect failed", err)
		s.attemptFailed()
		e := log.Warn().Err(err)
		if tail := stderrOf(tr); tail != "" {
			e = e.Str("stderr", tail)
		}
		e.Msg("mcp: connect failed")
		return err
	}
	tools, err := s.list(cctx, sess)
	cancel()
	if err != nil {
		_ = sess.Close()
		reapStdio(tr)
		metricConnects.WithLabelValues(s.cfg.Name, "error").Inc()
		s.setDown("down: listing tools failed", err)
		s.attemptFailed()
		log.Warn().Err(err).Msg("mcp: tools/list failed")
		return err
	}
	metricConnects.WithLabelValues(s.cfg.Name, "ok").Inc()
	s.setUp(sess, tools)
	log.Info().Strs("tools", names(tools)).Msg("mcp: connected")
	first()

	ended := make(chan struct{})
	go func() { _ = sess.Wait(); close(ended) }()
	defer closeSession(sess, tr, ended)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ended:
			s.setDown("down: connection lost", nil)
			log.Warn().Msg("mcp: connection lost; reconnecting")
			return nil
		case <-s.changed:
			lctx, cancel := context.WithTimeout(ctx, s.timeout)
			tools, err := s.list(lctx, sess)
			cancel()
			if err != nil {
				s.setDown("down: listing tools failed", err)
				log.Warn().Err(err).Msg("mcp: tools/list after list_changed failed; reconnecting")
				return nil
			}
			s.setUp(sess, tools)
			log.Info().Strs("tools", names(tools)).Msg("mcp: tool list changed")
		case st := <-s.stuck:
			if st != sess {
				continue // a call on an earlier connection
			}
			s.setDown("down: not reading its input", nil)
			log.Warn().Msg("mcp: a call is still blocked sending to the server past its deadline; reconnecting")
			reapStdio(tr) // fails the blocked writes, which Close would wait for
			return nil
		case b := <-s.broken:
			if b != sess {
				continue // a call on an earlier connection
			}
			log.Warn().Msg("mcp: the connection can no longer be used (an answer over the bound on one message, or the server ended the session); reconnecting")
			reapStdio(tr)
			return nil
		case <-s.probe:
			pctx, cancel := context.WithTimeout(ctx, min(s.timeout, 5*time.Second))
			// Bounded by pctx: the SDK's write ignores it, and a wedged
			// stdio server would hold this loop, and Close, for good.
			_, err := bounded(pctx, func() (struct{}, error) { return struct{}{}, sess.Ping(pctx, nil) }, 0, nil)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.setDown("down: ping failed", err)
				log.Warn().Err(err).Msg("mcp: ping after a failed call failed; reconnecting")
				return nil
			}
		}
	}
}

// connectTimeout bounds a connection attempt (the start, initialize and
// the first tools/list): the calls' timeout, but at least what a start
// takes, which is far longer than a call should (found by a probe: a
// server slower to start than its calls' timeout was killed at every
// attempt and never connected). A process's start (npx fetching a package,
// a busy host) gets a minute; an HTTP server, which refuses connections
// until it listens (a quick failure, retried), gets 10 s for an initialize
// after a cold start, so that an attempt lost in a network that drops
// packets is given up, and tried again, within that.
func (s *server) connectTimeout() time.Duration {
	least := 10 * time.Second
	if s.cfg.Command != "" {
		least = time.Minute
	}
	return max(s.timeout, least)
}

// reapStdio kills what is left of a stdio server's process group.
// closeGrace bounds each wait of closeSession.
const closeGrace = 5 * time.Second

// closeSession closes sess, whose Wait closes ended, and reaps a stdio
// server. Each wait is bounded: Close waits for the calls in flight, and a
// stdio server that stopped reading its stdin holds them (the SDK's writes
// ignore contexts) until it is killed, so after closeGrace it is killed;
// should the session still not end, it is left to the process.
func closeSession(sess *mcp.ClientSession, tr mcp.Transport, ended <-chan struct{}) {
	closed := make(chan struct{})
	go func() { _ = sess.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(closeGrace):
	}
	reapStdio(tr)
	for _, c := range []<-chan struct{}{closed, ended} {
		select {
		case <-c:
		case <-time.After(closeGrace):
			return
		}
	}
}

func reapStdio(tr mcp.Transport) {
	if st, ok := tr.(*stdioTransport); ok && st.cmd.Process != nil {
		killGroup(st.cmd.Process.Pid)
	}
}

// maxServerTools bounds the tools the gateway takes up from one server
// (after allow and deny). Every one is offered to the model in each request
// that may use it, and tools/list pages on for as long as the server gives
// a next cursor: a server that lists more (or pages without end) is a
// misconfiguration or a fault, and is refused as a whole rather than cut
// at an arbitrary tool.
const maxServerTools = 1024

// errTooManyTools is the listing failure of a server over maxServerTools.
var errTooManyTools = fmt.Errorf("the server lists more than %d tools; select fewer with allow or deny", maxServerTools)

// list pages through tools/list and applies allow, deny and prefix.
func (s *server) list(ctx context.Context, sess *mcp.ClientSession) ([]*Tool, error) {
	var out []*Tool
	read := 0
	seen := map[string]bool{}
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if t == nil || !s.wanted(t.Name) {
			continue
		}
		// The bound is on the tools taken up; tools skipped below count
		// only against a looser bound on the listing's length (and its
		// warnings).
		if read++; read > 2*maxServerTools {
			return nil, errTooManyTools
		}
		name := s.cfg.Prefix + t.Name
		if !toolName.MatchString(name) {
			s.m.log.Warn().Str("mcp_server", s.cfg.Name).Str("tool", name).Msg("mcp: tool name is not a valid OpenAI function name; skipped")
			continue
		}
		if seen[name] {
			s.m.log.Warn().Str("mcp_server", s.cfg.Name).Str("tool", name).Msg("mcp: the server lists a tool name twice; the first is kept")
			continue
		}
		seen[name] = true
		params, ok := inputSchema(t.InputSchema)
		if !ok {
			s.m.log.Warn().Str("mcp_server", s.cfg.Name).Str("tool", name).Msg("mcp: tool input schema is not an object schema; skipped")
			continue
		}
		if len(out) == maxServerTools {
			return nil, errTooManyTools
		}
		desc := t.Description
		if desc == "" {
			desc = t.Title
		}
		desc = config.ClipDescription(desc) // servers write long ones; OpenAI refuses the request
		repeatable := t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint)
		out = append(out, &Tool{
			Tool: config.Tool{Name: name, Description: desc, Parameters: string(params), Kind: "mcp", Server: s.cfg.Name,
				Timeout: config.Duration(s.timeout), Models: s.cfg.Models, MaxCalls: s.cfg.MaxCalls, Approval: s.approval(t.Name),
				Repeatable: repeatable},
			Server: s.cfg.Name, Remote: t.Name,
		})
	}
	return out, nil
}

// inputSchema is a tool's input schema as function parameters: an object
// schema ("type":"object" added when the type is left out, as in {}), or
// the empty object schema when there is none. ok is false for anything
// else (true, a string schema): MCP requires an object schema, and
// upstreams refuse every request that offers a function with another.
func inputSchema(in any) (params []byte, ok bool) {
	if in == nil {
		return []byte(`{"type":"object","properties":{}}`), true
	}
	b, err := json.Marshal(in)
	if err != nil {
		return nil, false
	}
	r := gjson.ParseBytes(b)
	switch typ := r.Get("type"); {
	case !r.IsObject():
		return nil, false
	case !typ.Exists():
		b, err = sjson.SetBytes(b, "type", "object")
		return b, err == nil
	default:
		return b, typ.Str == "object"
	}
}

// wanted applies allow (empty = all) then deny, as globs on the server's name.
func (s *server) wanted(name string) bool {
	if len(s.cfg.Allow) > 0 && !matchAny(s.cfg.Allow, name) {
		return false
	}
	return !matchAny(s.cfg.Deny, name)
}

// approval returns "always" when the server's approval globs match its own
// tool name (before prefix, like allow and deny), else "".
func (s *server) approval(name string) string {
	if matchAny(s.cfg.Approval, name) {
		return "always"
	}
	return ""
}

func matchAny(globs []string, name string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

func (s *server) setUp(sess *mcp.ClientSession, tools []*Tool) {
	s.mu.Lock()
	s.session, s.tools = sess, tools
	offered := make([]string, len(tools)) // a new slice: publish reads the old one unlocked
	for i, t := range tools {
		offered[i] = t.Name
	}
	s.offered, s.listed = offered, true
	s.state = errf("up: %d tools", len(tools))
	close(s.up)
	s.up = make(chan struct{})
	s.failed = make(chan struct{})
	s.mu.Unlock()
	s.upGauge.Set(1)
	s.toolsGauge.Set(float64(len(tools)))
	s.m.publish()
}

// attemptFailed wakes the calls waiting in nextSession: the server did not
// come back, and the next attempt is a backoff away.
func (s *server) attemptFailed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.failed: // an earlier attempt since the last session failed too
	default:
		close(s.failed)
	}
}

// nextSession waits, bounded by ctx, for a session other than old to be
// up, and returns it (nil when ctx ended first, or when an attempt to
// connect failed since the last session came up: the server is down).
// failed is per session, not per attempt, so an attempt that failed
// before the wait began is seen too.
func (s *server) nextSession(ctx context.Context, old *mcp.ClientSession) *mcp.ClientSession {
	for {
		s.mu.Lock()
		sess, up, failed := s.session, s.up, s.failed
		s.mu.Unlock()
		if sess != nil && sess != old {
			return sess
		}
		select {
		case <-up:
		case <-failed:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// breakSession takes sess, which can no longer be used (an answer over the
// bound on one message broke it, the SDK closing the connection; the
// server ended it), out of use at once and has the connection ended: calls
// made on it meanwhile would fail with the same error (and be told their
// own output was too large). It reports whether sess was still in use
// (false: an earlier call broke it, or it was replaced).
func (s *server) breakSession(sess *mcp.ClientSession) bool {
	s.mu.Lock()
	current := s.session == sess
	s.mu.Unlock()
	if !current {
		return false
	}
	s.setDown("down: connection broken", nil)
	for {
		select {
		case s.broken <- sess:
			return true
		default:
		}
		// A signal left for an earlier connection (its loop ended
		// otherwise) would keep this one's out: it goes.
		select {
		case <-s.broken:
		default:
		}
	}
}

func (s *server) setDown(state string, err error) {
	s.mu.Lock()
	had := s.session != nil || len(s.tools) > 0
	s.session, s.tools, s.state = nil, nil, state
	s.mu.Unlock()
	if !errors.Is(err, context.Canceled) && state != "down: closed" {
		s.upGauge.Set(0)
		s.toolsGauge.Set(0)
	}
	if had {
		s.m.publish()
	}
}
