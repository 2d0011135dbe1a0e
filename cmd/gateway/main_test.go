package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testproc"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testproc.Cleanup()
	os.Exit(code)
}

func chat(addr, model, key string) (int, string, error) {
	return post(addr, model, key, "hello")
}

// chatText asks model text, without a key.
func chatText(addr, model, text string) (int, string, error) {
	return post(addr, model, "", text)
}

func post(addr, model, key, text string) (int, string, error) {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"`+text+`"}]}`))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestShippedConfigOffline is the README's run command: the shipped
// config.toml, no keys, no network, the demo model answers; SIGTERM exits 0.
func TestShippedConfigOffline(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	if out, err := exec.Command(bin, "-check", "-config", "../../config.toml").CombinedOutput(); err != nil {
		t.Fatalf("-check: %v\n%s", err, out)
	}
	cmd, base := testproc.Start(t, bin, "../../config.toml")
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	if err := exec.Command(bin, "-healthcheck", "http://"+addr+"/healthz").Run(); err != nil {
		t.Fatalf("-healthcheck: %v", err)
	}
	status, body, err := chat(addr, "demo", "")
	if err != nil || status != 200 || !strings.Contains(body, `"chat.completion"`) {
		t.Fatalf("demo: %d %v %s", status, err, body)
	}
	// The README's tool example: the demo model calls both server tools,
	// with arguments the shipped schemas accept, and answers with both
	// results.
	status, body, err = chatText(addr, "demo", "what time is it, and what is 2+3*4?")
	if err != nil || status != 200 || !strings.Contains(body, `\"status\":\"ok\"`) || strings.Contains(body, "invalid_arguments") ||
		!strings.Contains(body, "14") || !strings.Contains(body, "UTC") {
		t.Fatalf("demo with tools: %d %v %s", status, err, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if state, err := cmd.Process.Wait(); err != nil || state.ExitCode() != 0 {
		t.Fatalf("exit after SIGTERM: %v %v", state, err)
	}
}

// TestTraceFlag: -trace writes an execution trace of the run, which the
// gateway ends at shutdown, so that go tool trace can read it.
func TestTraceFlag(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	out := filepath.Join(t.TempDir(), "gateway.trace")
	cmd, base := testproc.Start(t, bin, "../../config.toml", "-trace", out)
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	if status, body, err := chat(addr, "demo", ""); err != nil || status != 200 {
		t.Fatalf("demo: %d %v %s", status, err, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if state, err := cmd.Process.Wait(); err != nil || state.ExitCode() != 0 {
		t.Fatalf("exit after SIGTERM: %v %v", state, err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	// A trace opens with its version header ("go 1.26 trace") and, once
	// stopped, holds the run's events: more than the header.
	if len(b) < 4096 || !strings.HasPrefix(string(b), "go 1.") || !strings.Contains(string(b[:16]), " trace") {
		t.Fatalf("not a finished execution trace: %d bytes, %q", len(b), b[:min(len(b), 16)])
	}
}

func TestCheckRejectsBadConfig(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	dir := t.TempDir()
	cases := map[string]string{
		"unknown key":   "[server]\nlisten = \"127.0.0.1:1\"\nlisen = 3\n",
		"bad reference": "[[providers]]\nname=\"p\"\nkind=\"mock\"\n[[models]]\nname=\"m\"\nprovider=\"q\"\n",
	}
	for name, body := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "_")+".toml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "-check", "-config", path).CombinedOutput()
		if err == nil {
			t.Errorf("%s: -check accepted it", name)
		}
		if name == "unknown key" && !strings.Contains(string(out), `line 3: unknown key "server.lisen"`) {
			t.Errorf("%s: message %q", name, out)
		}
		if name == "bad reference" && !strings.Contains(string(out), `line 6: models[0].provider: unknown provider "q"`) {
			t.Errorf("%s: message %q", name, out)
		}
	}
}

// The listen address is checked after -listen replaced it: a file whose
// listen is a placeholder starts with the flag (the image always passes
// one), and -check agrees; without the flag it is refused.
func TestCheckListenAfterTheFlag(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	path := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(path, []byte("[server]\nlisten = \"8080\"\n[[providers]]\nname=\"p\"\nkind=\"mock\"\n[[models]]\nname=\"m\"\nprovider=\"p\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "-check", "-config", path, "-listen", "127.0.0.1:0").CombinedOutput(); err != nil {
		t.Fatalf("with -listen: %v %s", err, out)
	}
	out, err := exec.Command(bin, "-check", "-config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `server.listen: "8080" is not host:port`) {
		t.Fatalf("without -listen: %v %s", err, out)
	}
}

// checkConfig is a config -check passes: one model of an upstream that
// is never called.
const checkConfig = `[server]
listen = "127.0.0.1:1"
[[providers]]
name = "echo"
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
api_key = "sk-x"
[[models]]
name = "echo"
provider = "echo"
`

// -check runs the build's validation too: a config the gateway refuses to
// start with (here two [[policies]] of one tenant, an error only the build
// finds) fails the check with the start's message, exit 1. It used to
// pass. The shipped config still passes (TestShippedConfigOffline).
func TestCheckRunsTheBuild(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	path := filepath.Join(t.TempDir(), "dup.toml")
	body := checkConfig + `[[keys]]
name = "b"
tenant = "tb"
key = "key-tb-2222222222"
[[policies]]
tenant = "tb"
models = ["echo"]
[[policies]]
tenant = "tb"
tool_trace = true
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	const want = `policies[1]: tenant "tb" already has policies[0]`
	out, err := exec.Command(bin, "-check", "-config", path).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), want) || strings.Contains(string(out), ": ok (") {
		t.Fatalf("-check of two policies for one tenant: exit %d, %q; want exit 1 with %q", code, out, want)
	}
	// The start refuses it with the same message.
	out, err = exec.Command(bin, "-config", path).CombinedOutput()
	if code := exitCode(err); code != 1 || !strings.Contains(string(out), strings.ReplaceAll(want, `"`, `\"`)) {
		t.Fatalf("start with two policies for one tenant: exit %d, %q", code, out)
	}
	out, err = exec.Command(bin, "-check", "-config", "../../config.toml").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "config.toml: ok (") {
		t.Fatalf("-check of the shipped config: %v %q", err, out)
	}
}

// exitCode is a finished command's exit status (0 for a nil error, -1 for
// one that did not run).
func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

// TestReloadOnSIGHUP: a stream in flight finishes on the old config, the next
// request sees the new allow-list, and an invalid file keeps the old config.
func TestReloadOnSIGHUP(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.toml")
	write := func(models string) {
		body := fmt.Sprintf(`
[server]
log_level = "warn"
[[providers]]
name = "demo"
kind = "mock"
[providers.mock]
chunk_delay = "30ms"
chunk_size = 2
[[models]]
name = "demo"
provider = "demo"
[[models]]
name = "other"
provider = "demo"
[[keys]]
tenant = "team"
key = "k-1"
[[policies]]
tenant = "team"
models = [%s]
`, models)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(`"demo", "other"`)
	cmd, base := testproc.Start(t, bin, path)
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")

	// A slow stream starts on the old config.
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr+"/v1/chat/completions",
		strings.NewReader(`{"model":"other","stream":true,"messages":[{"role":"user","content":"a long enough question"}]}`))
	req.Header.Set("Authorization", "Bearer k-1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}

	write(`"demo"`)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var status int
	for i := 0; i < 100; i++ { // the reload is asynchronous
		if status, _, _ = chat(addr, "other", "k-1"); status == 404 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if status != 404 {
		t.Fatalf("after reload, a model outside the allow-list answered %d", status)
	}
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("in-flight stream did not complete: %v %q", err, rest)
	}

	// An invalid file is refused, and so is a valid one without keys (an
	// emptied file, or one being rewritten), which would open the gateway:
	// the last good config stays.
	for _, file := range []string{
		"[server]\nbogus = 1\n",
		"[[providers]]\nname = \"demo\"\nkind = \"mock\"\n[[models]]\nname = \"demo\"\nprovider = \"demo\"\n",
	} {
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Process.Signal(syscall.SIGHUP)
		time.Sleep(300 * time.Millisecond)
		if status, body, _ := chat(addr, "demo", "k-1"); status != 200 {
			t.Fatalf("after reloading %q: %d %s", file, status, body)
		}
		if status, _, _ := chat(addr, "demo", ""); status != 401 {
			t.Fatalf("after reloading %q, without a key: %d", file, status)
		}
	}
}

// demoShutdownGateway starts the binary with a demo model pacing its chunks
// by chunkDelay and the given shutdown grace, begins a streamed request,
// reads its first line, sends SIGTERM, and returns the rest of the stream.
func demoShutdownGateway(t *testing.T, grace, chunkDelay string) (*exec.Cmd, string, string) {
	t.Helper()
	bin := testproc.Gateway(t)
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(`
[server]
log_level = "error"
shutdown_timeout = %q
[[providers]]
name = "demo"
kind = "mock"
[providers.mock]
chunk_delay = %q
chunk_size = 1
[[models]]
name = "demo"
provider = "demo"
`, grace, chunkDelay)), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, base := testproc.Start(t, bin, path)
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	resp, err := http.Post("http://"+addr+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"demo","stream":true,"messages":[{"role":"user","content":"a question long enough to stream for a while"}]}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", err, resp)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	rest, _ := io.ReadAll(br)
	return cmd, addr, string(rest)
}

// TestGracefulShutdownFinishesStreams: SIGTERM stops accepting, lets the
// in-flight stream finish with [DONE], and exits 0.
func TestGracefulShutdownFinishesStreams(t *testing.T) {
	t.Parallel()
	cmd, addr, rest := demoShutdownGateway(t, "20s", "20ms")
	if !strings.HasSuffix(rest, "data: [DONE]\n\n") {
		t.Fatalf("in-flight stream cut by shutdown: %q", rest)
	}
	exitedAndClosed(t, cmd, addr)
}

// exitedAndClosed waits for the gateway cmd to exit 0 and checks that addr
// no longer accepts connections.
func exitedAndClosed(t *testing.T, cmd *exec.Cmd, addr string) {
	t.Helper()
	if state, err := cmd.Process.Wait(); err != nil || state.ExitCode() != 0 {
		t.Fatalf("exit: %v %v", state, err)
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Fatal("still accepting after shutdown")
	}
}

// TestShutdownGraceEndsStreamsWithAnError: a stream still running when the
// grace period ends gets event: error, never a quiet (truncated) end.
func TestShutdownGraceEndsStreamsWithAnError(t *testing.T) {
	t.Parallel()
	cmd, _, rest := demoShutdownGateway(t, "300ms", "200ms")
	if strings.Contains(rest, "[DONE]") || !strings.Contains(rest, "event: error\ndata: {\"error\"") || !strings.Contains(rest, "server_shutting_down") {
		t.Fatalf("stream end after the grace period: %q", rest)
	}
	if state, err := cmd.Process.Wait(); err != nil || state.ExitCode() != 0 {
		t.Fatalf("exit: %v %v", state, err)
	}
}

// metric reads one unlabelled metric from the gateway's /metrics.
func metric(addr, name string) (string, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in /metrics (status %d)", name, resp.StatusCode)
}

// TestGCFloor: the gateway starts the collector floor its config asks for
// (server.gc_min_growth_bytes, 32 MiB in the shipped config), which raises
// GOGC above Go's 100 on the demo's small heap; 0 leaves GOGC at 100 after
// collections. That the floor tunes after each collection is
// internal/gcfloor's TestFloorFollowsTheLiveHeap.
func TestGCFloor(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	shipped, err := os.ReadFile("../../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	off := filepath.Join(t.TempDir(), "off.toml")
	if err := os.WriteFile(off, []byte(strings.Replace(string(shipped), "[server]\n", "[server]\ngc_min_growth_bytes = 0\n", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path  string
		raise bool
	}{{"../../config.toml", true}, {off, false}} {
		_, base := testproc.Start(t, bin, c.path)
		addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
		first := ""
		deadline := time.Now().Add(30 * time.Second)
		for {
			// Requests allocate, so the gateway collects; the floor tunes
			// after each collection.
			for range 20 {
				if status, body, err := chat(addr, "demo", ""); err != nil || status != 200 {
					t.Fatalf("demo: %d %v %s", status, err, body)
				}
			}
			n, err := metric(addr, "go_gc_duration_seconds_count")
			if err != nil {
				t.Fatal(err)
			}
			if first == "" {
				first = n
			} else if n != first && !c.raise {
				break // at least one collection since the first reading, at Go's pacing
			}
			if c.raise && n != "0" {
				if p, err := metric(addr, "go_gc_gogc_percent"); err == nil && p != "100" {
					break // collected, and the floor tuned after it
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after 30 s of requests, no collection (or GOGC never raised: want raised %v)", c.path, c.raise)
			}
		}
		got, err := metric(addr, "go_gc_gogc_percent")
		if err != nil {
			t.Fatal(err)
		}
		if raised := got != "100"; raised != c.raise {
			t.Errorf("%s: go_gc_gogc_percent %s; want it raised above 100: %v", c.path, got, c.raise)
		}
	}
}

// A reload that sets server.metrics_listen does not open that listener
// (it is opened at start only), so /metrics stays where it was: on the
// main listener behind the admin key, not refused there with nothing
// serving it.
func TestReloadKeepsMetricsListen(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	path := filepath.Join(t.TempDir(), "config.toml")
	write := func(extra, models string) {
		body := fmt.Sprintf(`
[server]
log_level = "error"
admin_key = "adm-1"
%s
[[providers]]
name = "demo"
kind = "mock"
[[models]]
name = "demo"
provider = "demo"
[[models]]
name = "other"
provider = "demo"
[[keys]]
tenant = "team"
key = "k-1"
[[policies]]
tenant = "team"
models = [%s]
`, extra, models)
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("", `"demo", "other"`)
	cmd, base := testproc.Start(t, bin, path)
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	metrics := func() int {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer adm-1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := metrics(); s != 200 {
		t.Fatalf("/metrics before the reload: %d", s)
	}
	write(`metrics_listen = "127.0.0.1:1"`, `"demo"`)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var status int
	for range 100 { // the reload is asynchronous
		if status, _, _ = chat(addr, "other", "k-1"); status == 404 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if status != 404 {
		t.Fatalf("the reload did not happen: %d", status)
	}
	if s := metrics(); s != 200 {
		t.Fatalf("/metrics after a reload that set metrics_listen: %d (no listener serves it)", s)
	}
}

// TestSignalsWhileBuilding: the build can wait for MCP servers (15 s for one
// that never answers). A SIGHUP meanwhile, at start, does not end the
// gateway (its default action) but reloads the file once it serves; and a
// SIGTERM while such a reload builds is acted on at once, not after it.
func TestSignalsWhileBuilding(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	path := filepath.Join(t.TempDir(), "config.toml")
	cfg := "[server]\nshutdown_timeout = \"2s\"\n[[providers]]\nname = \"demo\"\nkind = \"mock\"\n[[models]]\nname = \"demo\"\nprovider = \"demo\"\n" +
		"[[mcp_servers]]\nname = \"mute\"\ncommand = \"sleep\"\nargs = [\"1000\"]\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, base := testproc.StartThen(t, bin, path, func(cmd *exec.Cmd) {
		go func() {
			time.Sleep(time.Second) // within the 15 s the build waits for the mute server
			_ = cmd.Process.Signal(syscall.SIGHUP)
		}()
	})
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	if status, body, err := chat(addr, "demo", ""); err != nil || status != 200 {
		t.Fatalf("after a SIGHUP at start: %d %v %s", status, err, body)
	}
	// The SIGHUP kept at start is reloading now, waiting for the mute MCP
	// server again.
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("still running %v after a SIGTERM sent while a reload builds", time.Since(start))
	}
}

// TestShutdownDelayKeepsServing: with server.shutdown_delay, a SIGTERM'd
// gateway goes on answering (on kept and new connections, JSON and
// streams) while /readyz says 503, every answer closes its connection, and
// it exits 0 once the delay is over.
func TestShutdownDelayKeepsServing(t *testing.T) {
	t.Parallel()
	bin := testproc.Gateway(t)
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(`
[server]
log_level = "error"
shutdown_delay = "6s"
[[providers]]
name = "demo"
kind = "mock"
[[models]]
name = "demo"
provider = "demo"
`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd, base := testproc.Start(t, bin, path)
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/v1")
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	ask := func(stream bool) (*http.Response, string) {
		t.Helper()
		body := `{"model":"demo","messages":[{"role":"user","content":"hello"}]}`
		if stream {
			body = `{"model":"demo","stream":true,"messages":[{"role":"user","content":"hello"}]}`
		}
		resp, err := client.Post("http://"+addr+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	if resp, body := ask(false); resp.StatusCode != 200 || resp.Close {
		t.Fatalf("before SIGTERM: %d close=%v %s", resp.StatusCode, resp.Close, body)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// A client of its own, not client (whose kept connection the next
	// answer must use) nor http.DefaultTransport, which may hold an idle
	// connection to this port from another test's gateway that listened
	// on it before: its reuse reads a reset.
	probe := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := probe.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 503 && strings.Contains(string(b), `"ready":false`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after SIGTERM: %d %s", resp.StatusCode, b)
		}
	}
	// The kept connection's next answer, a stream, and a new connection's:
	// all served, each closing its connection.
	if resp, body := ask(false); resp.StatusCode != 200 || !resp.Close || !strings.Contains(body, `"chat.completion"`) {
		t.Fatalf("JSON while draining: %d close=%v %s", resp.StatusCode, resp.Close, body)
	}
	if resp, body := ask(true); resp.StatusCode != 200 || !resp.Close || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("stream while draining: %d close=%v %q", resp.StatusCode, resp.Close, body)
	}
	if resp, body := ask(false); resp.StatusCode != 200 || !resp.Close {
		t.Fatalf("new connection while draining: %d close=%v %s", resp.StatusCode, resp.Close, body)
	}
	exitedAndClosed(t, cmd, addr)
}

// drain ends with its delay, at a second SIGTERM or SIGINT (not SIGHUP),
// or when the listener fails, whose error it returns.
func TestDrainEnds(t *testing.T) {
	t.Parallel()
	sigs, served := make(chan os.Signal, 1), make(chan error, 1)
	if err := drain(10*time.Millisecond, sigs, served); err != nil {
		t.Fatalf("after the delay: %v", err)
	}
	sigs <- syscall.SIGHUP
	if err := drain(10*time.Millisecond, sigs, served); err != nil || len(sigs) != 0 {
		t.Fatalf("with a SIGHUP: %v, %d signals left", err, len(sigs))
	}
	sigs <- syscall.SIGINT
	if err := drain(time.Hour, sigs, served); err != nil {
		t.Fatalf("a second signal: %v", err)
	}
	served <- errors.New("accept: too many open files")
	if err := drain(time.Hour, sigs, served); err == nil || !strings.Contains(err.Error(), "too many open files") {
		t.Fatalf("the listener failing: %v", err)
	}
}
