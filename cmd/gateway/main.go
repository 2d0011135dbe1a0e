// Command gateway runs the LLM gateway: flags, config, signals, listener.
// The wiring of the chains lives in package gateway.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/gateway"
	"github.com/llmgw/gateway/internal/gcfloor"
	"github.com/llmgw/gateway/observe"
	"github.com/llmgw/gateway/proxy"
)

func main() { os.Exit(run()) }

func run() int {
	// A SIGHUP while the gateway starts (a config reloader signalling every
	// replica) must not end it, which is its default action: it is kept,
	// and reloads the file once the gateway serves. The build may wait for
	// MCP servers and OpenAPI specs for seconds.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGHUP)
	path := flag.String("config", "config.toml", "path to config.toml")
	check := flag.Bool("check", false, "validate the config and exit (0 valid, 1 invalid)")
	level := flag.String("log-level", "", "override server.log_level (debug, info, warn, error)")
	format := flag.String("log-format", "", "override server.log_format (json, console)")
	listen := flag.String("listen", "", "override server.listen")
	health := flag.String("healthcheck", "", "GET this URL and exit 0 on 200 (for container HEALTHCHECKs without curl)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file (ends at shutdown)")
	memProfile := flag.String("memprofile", "", "write an allocation profile to this file at shutdown")
	traceFile := flag.String("trace", "", "write an execution trace of the whole run to this file (ends at shutdown; read it with go tool trace)")
	flag.Parse()
	if *health != "" {
		return healthcheck(*health)
	}
	if err := checkFlags(*level, *format); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		return 2
	}
	stopProfiles, err := startProfiles(*cpuProfile, *memProfile, *traceFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		return 2
	}
	defer stopProfiles()

	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	override(cfg, *level, *format, *listen)
	if err := cfg.Server.CheckListen(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", *path, err)
		return 1
	}
	if *check {
		// What stops a start stops the check: the build's validation
		// too (a second [[policies]] of one tenant, a spec that does not
		// load), with what it built closed again.
		// Its warnings are the check's; its info lines are a start's.
		log, flush := observe.NewLogger("warn", cfg.Server.LogFormat, os.Stderr)
		err := gateway.Check(cfg, log)
		flush()
		if err != nil {
			// Masked as the start's log line is: a spec URL's token= would
			// land in CI logs.
			fmt.Fprintf(observe.Secrets.Writer(os.Stderr), "%s: %v\n", *path, err)
			return 1
		}
		fmt.Printf("%s: ok (%d providers, %d models, %d tools)\n", *path, len(cfg.Providers), len(cfg.Models), len(cfg.Tools))
		return 0
	}
	log, flush := observe.NewLogger(cfg.Server.LogLevel, cfg.Server.LogFormat, os.Stderr)
	defer flush()

	rt, err := gateway.Build(cfg, log)
	if err != nil {
		log.Error().Err(err).Msg("cannot start")
		return 1
	}
	srv := proxy.NewServer(rt, log)
	gc := gcfloor.Start(*cfg.Server.GCMinGrowthBytes)
	defer gc.Stop()
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		log.Error().Err(err).Str("listen", cfg.Server.Listen).Msg("cannot listen")
		return 1
	}
	log.Info().Str("listen", ln.Addr().String()).Int("models", len(cfg.Models)).Msg("gateway started")

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	if addr := cfg.Server.MetricsListen; addr != "" {
		// Operator routes without keys, on an address only operators reach;
		// the main listener then refuses /metrics. Not changed by reload.
		mln, err := net.Listen("tcp", addr)
		if err != nil {
			log.Error().Err(err).Str("metrics_listen", addr).Msg("cannot listen")
			return 1
		}
		log.Info().Str("metrics_listen", mln.Addr().String()).Msg("operator routes served")
		go func() { _ = srv.ServeAdmin(mln) }()
	}
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	// Reloads run one at a time beside the signal loop: a SIGTERM during a
	// reload's build (which may wait for MCP servers) is acted on at once.
	// A SIGHUP during a reload asks for one more after it.
	sw := &swapper{srv: srv}
	reloads := make(chan struct{}, 1)
	go func() {
		for range reloads {
			reload(sw, gc, *path, *level, *format, *listen, log)
		}
	}()
	for {
		select {
		case err := <-served:
			if err != nil {
				log.Error().Err(err).Msg("server stopped")
				return 1
			}
			return 0
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				select {
				case reloads <- struct{}{}:
				default: // one is asked for already, and reads the file then
				}
				continue
			}
			sw.stop() // a reload still building is not swapped in
			code := 0
			if d := srv.Runtime().Config.Server.ShutdownDelay.D(); d > 0 {
				srv.Drain()
				log.Info().Str("signal", sig.String()).Dur("shutdown_delay", d).Msg("draining: /readyz answers 503 and answers close their connections until the shutdown begins")
				if err := drain(d, sigs, served); err != nil {
					log.Error().Err(err).Msg("server stopped while draining")
					code = 1
				}
			}
			log.Info().Str("signal", sig.String()).Msg("shutting down")
			grace := srv.Runtime().Config.Server.ShutdownTimeout.D()
			ctx, cancel := context.WithTimeout(context.Background(), grace)
			err := srv.Shutdown(ctx)
			cancel()
			closeRuntime(srv.Runtime(), log)
			if err != nil {
				log.Warn().Err(err).Msg("shutdown grace period ended with requests still running")
			}
			log.Info().Msg("stopped")
			return code
		}
	}
}

// drain waits d, the shutdown delay, while the gateway goes on serving; a
// second SIGTERM or SIGINT ends the wait (SIGHUP is ignored: the runtime
// serving now is the one that shuts down), and so does the listener
// failing, whose error it returns (served carries Serve's end).
func drain(d time.Duration, sigs <-chan os.Signal, served <-chan error) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case err := <-served:
			if err == nil {
				err = errors.New("the listener closed")
			}
			return err
		case sig := <-sigs:
			if sig != syscall.SIGHUP {
				return nil
			}
		}
	}
}

// reload builds a runtime from the file again and swaps it in. New requests
// use it; in-flight ones finish on the old one, which is closed after the
// shutdown grace period. An invalid file changes nothing, and neither does
// one without keys when the running config has some.
func reload(sw *swapper, gc *gcfloor.Floor, path, level, format, listen string, log zerolog.Logger) {
	srv := sw.srv
	cfg, err := config.Load(path)
	if err != nil {
		log.Error().Err(err).Msg("reload refused: the new config is invalid; keeping the old one")
		return
	}
	if len(cfg.Keys) == 0 && len(srv.Runtime().Config.Keys) > 0 {
		// A file emptied, or half written when the signal came, must not
		// open a gateway that asks for keys (and show anyone the usage the
		// gateway keeps across reloads). Opening it takes a restart.
		log.Error().Msg("reload refused: the new config has no [[keys]], which would open the gateway to anyone; keeping the old one (restart to run without keys)")
		return
	}
	override(cfg, level, format, listen)
	keepStartOnly(&cfg.Server, &srv.Runtime().Config.Server, log)
	rt, err := gateway.Build(cfg, log)
	if err != nil {
		log.Error().Err(err).Msg("reload refused: cannot build the new config; keeping the old one")
		return
	}
	old, ok := sw.swap(rt)
	if !ok {
		rt.Close()
		log.Info().Msg("reload abandoned: the gateway is shutting down")
		return
	}
	gc.SetMin(*cfg.Server.GCMinGrowthBytes)
	go func() {
		// Close the old runtime (demo servers, Redis, MCP children) only
		// after its last request, bounded by the longest upstream timeout.
		if !old.Drain(longestRequest(old.Config)) {
			log.Warn().Msg("closing the previous config with requests still running")
		}
		old.Close()
	}()
	log.Info().Int("models", len(cfg.Models)).Msg("config reloaded")
}

// swapper swaps a reload's runtime in unless shutdown began: a runtime
// built while the gateway shuts down is closed instead, as the shutdown
// closes the one it finds.
type swapper struct {
	srv     *proxy.Server
	mu      sync.Mutex
	stopped bool
}

func (s *swapper) swap(rt *proxy.Runtime) (*proxy.Runtime, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, false
	}
	return s.srv.Swap(rt), true
}

func (s *swapper) stop() {
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
}

// keepStartOnly keeps the [server] settings the listeners and the HTTP
// server take at start at the values in use (was), with a warning for
// each one the new config changed: the listen addresses (the metrics
// listener's too: a new value would make the main listener refuse
// /metrics with nothing else serving it), the read and idle timeouts and
// the connection buffers, and the log's level and format (the logger every
// part holds is built at start).
func keepStartOnly(now, was *config.Server, log zerolog.Logger) {
	keep(log, "log_level", &now.LogLevel, was.LogLevel)
	keep(log, "log_format", &now.LogFormat, was.LogFormat)
	keep(log, "listen", &now.Listen, was.Listen)
	keep(log, "metrics_listen", &now.MetricsListen, was.MetricsListen)
	keep(log, "read_timeout", &now.ReadTimeout, was.ReadTimeout)
	keep(log, "idle_timeout", &now.IdleTimeout, was.IdleTimeout)
	keep(log, "read_buffer", &now.ReadBuffer, was.ReadBuffer)
	keep(log, "write_buffer", &now.WriteBuffer, was.WriteBuffer)
}

func keep[T comparable](log zerolog.Logger, key string, now *T, was T) {
	if *now != was {
		log.Warn().Str("key", "server."+key).Msg("reload: server." + key + " changes only on restart; keeping the current one")
		*now = was
	}
}

// longestRequest bounds how long a request of cfg can run.
func longestRequest(cfg *config.Config) time.Duration {
	d := cfg.Server.ShutdownTimeout.D()
	for _, p := range cfg.Providers {
		if t := p.TotalTimeout.D(); t > d {
			d = t
		}
	}
	return d + cfg.ToolLoop.WallTime.D()
}

// checkFlags refuses a -log-level or -log-format the config file would
// refuse too (a bad one would otherwise be taken as info, or as JSON).
func checkFlags(level, format string) error {
	if level != "" && !slices.Contains(config.LogLevels, level) {
		return fmt.Errorf("-log-level %q is not one of %s", level, strings.Join(config.LogLevels, ", "))
	}
	if format != "" && !slices.Contains(config.LogFormats, format) {
		return fmt.Errorf("-log-format %q is not one of %s", format, strings.Join(config.LogFormats, ", "))
	}
	return nil
}

func override(cfg *config.Config, level, format, listen string) {
	if level != "" {
		cfg.Server.LogLevel = level
	}
	if format != "" {
		cfg.Server.LogFormat = format
	}
	if listen != "" {
		cfg.Server.Listen = listen
	}
}

func healthcheck(url string) int {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}

// startProfiles starts a CPU profile to cpu and an execution trace to tr,
// and returns the function that ends them and writes the allocation
// profile to mem ("" = none of that one).
func startProfiles(cpu, mem, tr string) (func(), error) {
	var cf, tf *os.File
	stopTrace := func() {
		if tf != nil {
			trace.Stop()
			_ = tf.Close()
		}
	}
	if tr != "" {
		f, err := os.Create(tr)
		if err != nil {
			return nil, err
		}
		if err := trace.Start(f); err != nil {
			_ = f.Close()
			return nil, err
		}
		tf = f
	}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			stopTrace()
			return nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			stopTrace()
			return nil, err
		}
		cf = f
	}
	return func() {
		stopTrace()
		if cf != nil {
			pprof.StopCPUProfile()
			_ = cf.Close()
		}
		if mem != "" {
			if f, err := os.Create(mem); err == nil {
				// The profile is as of the last completed collection:
				// one now takes in what was allocated since.
				runtime.GC()
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}
	}, nil
}

// runtimeCloseLimit bounds how long the process waits, at exit, for its
// runtime to release what it holds (MCP servers, Redis, exporters): a part
// that does not let go must not keep a stopped gateway alive.
const runtimeCloseLimit = 15 * time.Second

func closeRuntime(rt *proxy.Runtime, log zerolog.Logger) {
	if rt.Close == nil {
		return
	}
	done := make(chan struct{})
	go func() { rt.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(runtimeCloseLimit):
		log.Warn().Dur("waited", runtimeCloseLimit).Msg("the runtime did not close in time; exiting anyway")
	}
}
