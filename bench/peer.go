package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/tidwall/gjson"
	"github.com/valyala/fasthttp"

	"github.com/llmgw/gateway/internal/testproc"
)

// peerOptions are the flags that add a peer leg: any OpenAI-compatible
// endpoint (-target) or a gateway bench installs and starts (-peer).
type peerOptions struct {
	url     string     // -target: the endpoint's OpenAI base URL (".../v1")
	name    string     // -target-name
	model   string     // -model: replaces the model of every request body to the peer
	headers headerList // -header K:V, repeatable; "{mock}" in a value is the mock's base URL
	kind    string     // -peer: "portkey" ("" = none)
}

// headerList is a repeatable -header K:V flag.
type headerList [][2]string

func (h *headerList) String() string {
	var parts []string
	for _, kv := range *h {
		parts = append(parts, kv[0]+":"+kv[1])
	}
	return strings.Join(parts, ",")
}

func (h *headerList) Set(v string) error {
	k, val, ok := strings.Cut(v, ":")
	k, val = strings.TrimSpace(k), strings.TrimSpace(val)
	if !ok || k == "" {
		return fmt.Errorf("want NAME:VALUE, got %q", v)
	}
	*h = append(*h, [2]string{k, val})
	return nil
}

// redactHeaders returns args with the value of every -header replaced by
// "…" (a header may carry an API key, and the command is written into the
// results), except a value holding {mock}, which is no secret.
func redactHeaders(args []string) []string {
	out := append([]string(nil), args...)
	redact := func(kv string) string {
		if strings.Contains(kv, "{mock}") {
			return kv
		}
		k, _, _ := strings.Cut(kv, ":")
		return k + ":…"
	}
	for i := 0; i < len(out); i++ {
		switch a := out[i]; {
		case (a == "-header" || a == "--header") && i+1 < len(out):
			out[i+1] = redact(out[i+1])
			i++
		case strings.HasPrefix(a, "-header="), strings.HasPrefix(a, "--header="):
			name, v, _ := strings.Cut(a, "=")
			out[i] = name + "=" + redact(v)
		}
	}
	return out
}

// validate checks the flags before anything is built.
func (o *peerOptions) validate() error {
	switch {
	case o.kind != "" && o.kind != "portkey":
		return fmt.Errorf("unknown -peer %q (have portkey)", o.kind)
	case o.kind != "" && o.url != "":
		return errors.New("-peer and -target are exclusive: -peer starts its own endpoint")
	case o.url == "":
		return nil
	}
	u, err := url.Parse(strings.ReplaceAll(o.url, "{mock}", "http://127.0.0.1:1/v1"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("-target %q: want an http(s) base URL such as http://127.0.0.1:4000/v1", o.url)
	}
	return nil
}

// peerInfo describes the peer leg of a run, as written to results.json.
type peerInfo struct {
	Name    string   `json:"name"`
	Kind    string   `json:"kind"` // target | portkey
	URL     string   `json:"url"`
	Version string   `json:"version,omitempty"`
	Status  string   `json:"status"` // ok | skipped | failed
	Reason  string   `json:"reason,omitempty"`
	Headers []string `json:"headers,omitempty"` // names only: values may be keys
	Model   string   `json:"model,omitempty"`
	// CPUMeasured is false for an endpoint bench did not start: its CPU and
	// memory are some other process's.
	CPUMeasured bool     `json:"cpu_measured"`
	Notes       []string `json:"notes,omitempty"` // what a reader of its figures should know
}

// peerScenarios are the scenarios a plain OpenAI-compatible endpoint can
// run; the others measure a gateway feature bench configures, and say why
// the peer is not in them.
var peerScenarios = map[string]bool{"passthrough": true, "stream": true, "burst": true, "sweep": true}

var peerNotRun = map[string]string{
	"toolloop":  "the server-side tool loop is a gateway feature",
	"cache":     "it measures the gateway's response cache",
	"fallback":  "the fallback model is configured in the bench gateway",
	"limits":    "it measures the bench gateway's Redis-backed limits",
	"layers":    "it measures the bench gateway's own layers",
	"replicas":  "it measures bench gateway replicas behind HAProxy",
	"responses": "it compares the gateway's own Responses API with its chat completions",
	"streams":   "held streams need a proxy started by bench in front of a second, slow mock",
}

// portkeyVersion pins the Portkey gateway that -peer portkey installs, so
// runs compare against the same code. honoNodeServer pins its HTTP server
// package: from @hono/node-server 1.14.2 on, Portkey 1.15.2 answers every
// stream with a 500 ("TypeError: immutable" when it adds its headers to the
// upstream response; Portkey-AI/gateway issue 1389).
const (
	portkeyVersion = "1.15.2"
	honoNodeServer = "1.14.1"
)

// startPeer sets b.peer from the flags once the mock runs. A peer that
// cannot run is recorded in b.peerInfo (skipped: bench could not provide it;
// failed: it did not answer) and leaves b.peer nil.
func (b *bench) startPeer(o peerOptions) {
	if o.kind == "" && o.url == "" {
		return
	}
	mockBase := "http://" + b.api.addr + "/v1"
	info := &peerInfo{Name: o.name, Kind: "target", Model: o.model, CPUMeasured: false}
	b.peerInfo = info
	headers := make([][2]string, 0, len(o.headers)+3)
	var proc *child
	base := strings.ReplaceAll(o.url, "{mock}", mockBase)
	if o.kind == "portkey" {
		info.Kind, info.Version = "portkey", portkeyVersion
		if info.Name == "" {
			info.Name = "portkey"
		}
		var err error
		if proc, err = b.startPortkey(); err != nil {
			info.Status, info.Reason, info.URL = "skipped", err.Error(), "(not started)"
			fmt.Printf("peer portkey: skipped: %s\n", err)
			return
		}
		base = "http://" + proc.addr + "/v1"
		// Portkey's OpenAI provider with a custom host forwards to the
		// mock; the bearer key is passed through and ignored by the mock.
		headers = append(headers, [2]string{"x-portkey-provider", "openai"},
			[2]string{"x-portkey-custom-host", mockBase}, [2]string{"Authorization", "Bearer bench"})
		info.CPUMeasured = true
		info.Notes = append(info.Notes, "Portkey's stream handler waits 25 ms before it forwards an upstream stream's first chunk "+
			"(build/start-server.js of the installed package), which its time to first byte and first content token include.")
	}
	if info.Name == "" {
		info.Name = "target"
	}
	for _, h := range o.headers {
		headers = append(headers, [2]string{h[0], strings.ReplaceAll(h[1], "{mock}", mockBase)})
	}
	for _, h := range headers {
		info.Headers = append(info.Headers, h[0])
	}
	u, _ := url.Parse(base) // validated
	info.URL = u.Redacted()
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
	}
	t := makeTarget(info.Name, addr, strings.TrimSuffix(base, "/"), u.Scheme == "https", proc, nil, 4096)
	t.headers, t.model = headers, o.model
	if proc != nil {
		t.upstream = b.api
	}
	fmt.Printf("peer %s: asking %s for a chat completion and a stream (up to 60 s each)\n", info.Name, base)
	if reason := probePeer(t); reason != "" {
		info.Status, info.Reason = "failed", reason
		fmt.Printf("peer %s: could not run: %s\n", info.Name, reason)
		return
	}
	info.Status = "ok"
	b.peer = t
	fmt.Printf("peer %s at %s\n", info.Name, base)
}

// probePeer returns why t cannot serve the peer scenarios ("" when it
// answers a chat completion and a stream).
func probePeer(t *target) string {
	status, _, body, err := t.post(t.body(chatBody), "")
	switch {
	case errors.Is(err, fasthttp.ErrTimeout):
		return "no answer to a chat completion within the client's timeout (it accepted the connection): " + err.Error()
	case err != nil:
		return "unreachable: " + err.Error()
	case status != 200:
		return fmt.Sprintf("answered %d to a chat completion: %.300s", status, body)
	case !gjson.GetBytes(body, "choices.0.message.content").Exists():
		return fmt.Sprintf("answered a chat completion without choices[0].message.content: %.300s", body)
	}
	if s := t.stream(streamBody)(time.Now()); s.err != nil {
		return "streamed chat completion: " + s.err.Error()
	} else if s.ttft == 0 {
		return "streamed chat completion without a content delta"
	}
	return ""
}

// startPortkey installs the pinned Portkey gateway with npm into the user's
// cache directory (once) and starts it with node on a free port. Its error
// says why Portkey cannot run here.
func (b *bench) startPortkey() (*child, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, errors.New("node is not installed (Portkey's gateway is a Node.js program)")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return nil, errors.New("npm is not installed (bench installs Portkey's gateway with it)")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return nil, fmt.Errorf("no cache directory to install Portkey into: %w", err)
	}
	dir := filepath.Join(cache, "llmgw-bench", "portkey-"+portkeyVersion+"-hono-node-server-"+honoNodeServer)
	server := filepath.Join(dir, "node_modules", "@portkey-ai", "gateway", "build", "start-server.js")
	if _, err := os.Stat(server); err != nil {
		fmt.Printf("installing @portkey-ai/gateway@%s into %s...\n", portkeyVersion, dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		// A package.json of its own keeps npm from walking up to another
		// project, and pins Portkey's server package (see honoNodeServer).
		pkg := `{"private":true,"overrides":{"@hono/node-server":"` + honoNodeServer + `"}}` + "\n"
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(pkg), 0o644); err != nil {
			return nil, err
		}
		cmd := exec.CommandContext(b.ctx, npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "@portkey-ai/gateway@"+portkeyVersion)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("npm install @portkey-ai/gateway@%s failed: %v: %s", portkeyVersion, err, truncate(strings.TrimSpace(string(out)), 300))
		}
		if _, err := os.Stat(server); err != nil {
			return nil, fmt.Errorf("npm installed @portkey-ai/gateway@%s without %s", portkeyVersion, server)
		}
	}
	addr, err := testproc.Loopback()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	// --headless: no UI; the server listens on every interface at --port.
	c, err := b.procs.startAt("portkey", addr, node, server, "--port="+port, "--headless")
	if err != nil {
		// The log goes with bench's temp dir: say what it held.
		if log, rerr := os.ReadFile(filepath.Join(b.procs.logDir, "portkey.log")); rerr == nil && len(log) > 0 {
			err = fmt.Errorf("%w: %s", err, truncate(strings.TrimSpace(string(log[max(0, len(log)-400):])), 400))
		}
		return nil, err
	}
	return c, nil
}

// withPeer appends the peer's job to jobs when a peer leg runs.
func (b *bench) withPeer(jobs []job, w func(*target) workload) []job {
	if b.peer == nil {
		return jobs
	}
	return append(jobs, job{b.peer, w(b.peer)})
}

// peerRatios adds the peer's figures against the floor and the gateway to
// a closed-model scenario: throughput and, when measured, CPU per request.
func (b *bench) peerRatios(r *scenarioResult, m map[string]*leg) {
	if b.peer == nil {
		return
	}
	p, f, g := m[b.peer.name], m["floor"], m["gateway"]
	if p == nil || f == nil || g == nil {
		return
	}
	n := b.peer.name
	r.fig(n+"/floor throughput", ratio(p.ThroughputRPS, f.ThroughputRPS), "×")
	r.fig(n+"/gateway throughput", ratio(p.ThroughputRPS, g.ThroughputRPS), "×")
	if !p.CPUNotMeasured {
		r.fig(n+"/floor CPU per request", ratio(p.ProxyCPUPer1k, f.ProxyCPUPer1k), "×")
		r.fig(n+"/gateway CPU per request", ratio(p.ProxyCPUPer1k, g.ProxyCPUPer1k), "×")
	}
}

// notePeer says in r why the peer did not run in it.
func (b *bench) notePeer(r *scenarioResult) {
	if b.peer == nil || peerScenarios[r.Name] {
		return
	}
	r.Notes = append(r.Notes, fmt.Sprintf("%s was not run in this scenario: %s", b.peer.name, peerNotRun[r.Name]))
}
