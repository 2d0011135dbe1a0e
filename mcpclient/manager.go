package mcpclient

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
)

// Options configure a Manager. Servers are used as given: config applies
// their defaults (timeout: tool_loop.tool_timeout) and validates them. The
// other fields are the manager's own timing, not configuration; their zero
// values take the defaults below.
type Options struct {
	Servers []config.MCPServer
	// StartWait is how long Start waits for the first connection attempt of
	// every server, so that the first requests already see their tools.
	// Default 15s; a server still connecting after it joins later.
	StartWait time.Duration
	// MinBackoff and MaxBackoff bound the reconnect delay, doubled after
	// each failed attempt. Defaults 200ms and 5s: a local child process or
	// an HTTP server on the same network is cheap to retry.
	MinBackoff, MaxBackoff time.Duration
	// KeepAlive pings every connected server this often; a failed ping ends
	// the connection (and so hides its tools) until a reconnect succeeds.
	// Default 10s.
	KeepAlive time.Duration
	// StuckGrace is how long a call may stay blocked past its deadline
	// before its connection is taken for wedged and reopened (see
	// callTool). Default 5s.
	StuckGrace time.Duration
	Logger     zerolog.Logger
}

// Tool is one MCP tool as the gateway offers it. Immutable.
type Tool struct {
	config.Tool        // Kind "mcp"; Name is the exposed (prefixed) name; Parameters the input schema JSON
	Server      string // the [[mcp_servers]] name
	Remote      string // the tool's name on the server
	// Tool.Repeatable: the server says (its annotations) that the tool
	// only reads, or that calling it again with the same arguments has no
	// further effect, so a call whose fate is unknown may be sent again
	// (and an answer it took part in stored).
}

// Manager holds the connections to the configured MCP servers. Safe for
// concurrent use; Close ends every connection and child process.
type Manager struct {
	opts    Options
	log     zerolog.Logger
	servers []*server

	mu      sync.Mutex // serialises publish
	snap    atomic.Pointer[snapshot]
	version atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// snapshot is the published tool set. Immutable.
type snapshot struct {
	tools  []config.Tool
	byName map[string]*Tool
}

var toolName = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Start connects to every server in the background and waits up to
// Options.StartWait for each first attempt. It never fails: a server that
// cannot be reached offers no tools and is retried.
func Start(opts Options) *Manager {
	if opts.StartWait <= 0 {
		opts.StartWait = 15 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 200 * time.Millisecond
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(5*time.Second, opts.MinBackoff)
	}
	if opts.KeepAlive <= 0 {
		opts.KeepAlive = 10 * time.Second
	}
	if opts.StuckGrace <= 0 {
		opts.StuckGrace = 5 * time.Second
	}
	m := &Manager{opts: opts, log: opts.Logger}
	m.snap.Store(&snapshot{byName: map[string]*Tool{}})
	m.ctx, m.cancel = context.WithCancel(context.Background())
	first := make([]chan struct{}, len(opts.Servers))
	for i := range opts.Servers {
		s := newServer(m, opts.Servers[i])
		m.servers = append(m.servers, s)
		first[i] = make(chan struct{})
		m.wg.Add(1)
		go func(done chan struct{}) {
			defer m.wg.Done()
			var once sync.Once
			s.run(m.ctx, func() { once.Do(func() { close(done) }) })
		}(first[i])
	}
	deadline := time.NewTimer(opts.StartWait)
	defer deadline.Stop()
	for _, ch := range first {
		select {
		case <-ch:
		case <-deadline.C:
			m.log.Warn().Dur("waited", opts.StartWait).Msg("mcp: some servers are still connecting; their tools join when ready")
			return m
		}
	}
	return m
}

// Close ends every connection (stdio servers are stopped: stdin closed,
// then SIGTERM, then SIGKILL of their process group) and waits for the
// connection goroutines. Safe to call more than once.
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
}

// Version changes whenever Tools returns a different set. One atomic load.
func (m *Manager) Version() uint64 { return m.version.Load() }

// Tools returns the tools of the connected servers, in server order, as
// tool definitions of kind "mcp". The slice is shared and read-only.
func (m *Manager) Tools() []config.Tool { return m.snap.Load().tools }

// Lookup returns the tool exposed as name, or nil.
func (m *Manager) Lookup(name string) *Tool { return m.snap.Load().byName[name] }

// Status reports every server for /readyz: "up: N tools" or "down: why".
// Keys are "mcp:<name>".
func (m *Manager) Status() map[string]string {
	out := make(map[string]string, len(m.servers))
	for _, s := range m.servers {
		out["mcp:"+s.cfg.Name] = s.status()
	}
	return out
}

// publish rebuilds the snapshot from every server's current tools. A name
// offered by two servers goes to the first listed, whether it is up or
// down: while it is down, the other's tool of that name is not offered in
// its place (its approval gate, its arguments, its effects are another
// tool's). Until a server without a prefix has listed its tools once
// (since start or reload), a later server without one offers none: any of
// its names may be the earlier one's.
func (m *Manager) publish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	owner := map[string]string{} // tool name → the first server that offers it
	unknown := ""                // the first server without a prefix that has not listed yet
	held := map[*server]bool{}
	for _, s := range m.servers {
		names, listed := s.offeredNames()
		for _, n := range names {
			if _, taken := owner[n]; !taken {
				owner[n] = s.cfg.Name
			}
		}
		if s.cfg.Prefix != "" {
			continue
		}
		if unknown != "" {
			if len(s.currentTools()) > 0 {
				m.log.Warn().Str("server", s.cfg.Name).Str("waiting_for", unknown).
					Msg("mcp: tools held back until an earlier server without a prefix lists its own; set a prefix")
			}
			held[s] = true
		} else if !listed {
			unknown = s.cfg.Name
		}
	}
	next := &snapshot{byName: map[string]*Tool{}}
	for _, s := range m.servers {
		if held[s] {
			continue
		}
		for _, t := range s.currentTools() {
			if kept := owner[t.Name]; kept != s.cfg.Name {
				m.log.Warn().Str("tool", t.Name).Str("server", s.cfg.Name).Str("kept", kept).
					Msg("mcp: two servers offer the same tool name; set a prefix")
				continue
			}
			if next.byName[t.Name] != nil {
				continue // listed twice by its server
			}
			next.byName[t.Name] = t
			next.tools = append(next.tools, t.Tool)
		}
	}
	m.snap.Store(next)
	m.version.Add(1)
}

// names lists the exposed tool names (for logs).
func names(tools []*Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.Name
	}
	sort.Strings(out)
	return out
}

// errf is a short status reason.
func errf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
