// Package deploy holds the deployment files (compose.yaml, haproxy.cfg,
// kubernetes/); this test keeps them in agreement with the gateway config
// they run (config.toml), since no container runtime or cluster is
// available to apply them here.
package deploy

import (
	"bytes"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/llmgw/gateway/config"
)

// envRef finds the ${NAME} references of a config.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// deployConfig is config.toml as every replica loads it, with its secrets
// set; vars are the environment variables it reads.
func deployConfig(t *testing.T) (cfg *config.Config, raw []byte, vars []string) {
	t.Helper()
	raw, err := os.ReadFile("config.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range envRef.FindAllSubmatch(raw, -1) {
		if v := string(m[1]); !slices.Contains(vars, v) {
			vars = append(vars, v)
		}
	}
	slices.Sort(vars)
	for _, v := range vars {
		t.Setenv(v, "test-"+strings.ToLower(v))
	}
	if cfg, err = config.Load("config.toml"); err != nil {
		t.Fatal(err)
	}
	return cfg, raw, vars
}

// port returns the port of a host:port.
func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("address %q has no port", addr)
	}
	return n
}

// decodeYAML reads every document of a YAML file into a generic tree.
func decodeYAML(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var docs []map[string]any
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d map[string]any
		if err := dec.Decode(&d); err != nil {
			if err.Error() == "EOF" {
				return docs
			}
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, d)
	}
}

// at walks a generic YAML tree by map keys and list indexes; nil when absent.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any) string { s, _ := v.(string); return s }

func strs(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, e := range l {
		out = append(out, str(e))
	}
	return out
}

func keys(v any) []string {
	m, _ := v.(map[string]any)
	return slices.Sorted(maps.Keys(m))
}

// configPath checks a gateway command line and returns its -config path.
func configPath(t *testing.T, what string, cmd []string) string {
	t.Helper()
	if len(cmd) != 3 || cmd[0] != "/gateway" || cmd[1] != "-config" {
		t.Fatalf("%s: command %q, want /gateway -config PATH (no -listen: the config decides)", what, cmd)
	}
	return cmd[2]
}

func TestCompose(t *testing.T) {
	cfg, _, vars := deployConfig(t)
	listen := port(t, cfg.Server.Listen)
	docs := decodeYAML(t, "compose.yaml")
	if len(docs) != 1 {
		t.Fatalf("%d documents", len(docs))
	}
	services := at(docs[0], "services")
	var gateways []string
	for _, name := range keys(services) {
		s := at(services, name)
		if !strings.HasPrefix(str(at(s, "image")), "llmgw/gateway") {
			continue
		}
		gateways = append(gateways, name)
		path := configPath(t, name, strs(at(s, "entrypoint")))
		if !slices.Contains(strs(at(s, "volumes")), "./config.toml:"+path+":ro") {
			t.Errorf("%s: config.toml is not mounted at %s: %q", name, path, strs(at(s, "volumes")))
		}
		if hc := strs(at(s, "healthcheck", "test")); !slices.Contains(hc, "http://127.0.0.1:"+strconv.Itoa(listen)+"/readyz") {
			t.Errorf("%s: healthcheck %q does not check /readyz on the listen port %d", name, hc, listen)
		}
		grace, err := time.ParseDuration(str(at(s, "stop_grace_period")))
		// SIGTERM grace: shutdown_delay, shutdown_timeout, then up to 2 s
		// for the streams still running to write their error event.
		if err != nil || grace < sigtermGrace(cfg) {
			t.Errorf("%s: stop_grace_period %v is not shutdown_delay %v + shutdown_timeout %v + 5 s", name, grace, cfg.Server.ShutdownDelay.D(), cfg.Server.ShutdownTimeout.D())
		}
		if env := keys(at(s, "environment")); !slices.Equal(env, vars) {
			t.Errorf("%s: environment %q, the config reads %q", name, env, vars)
		}
	}
	if len(gateways) < 2 {
		t.Fatalf("gateway replicas %q, want at least two", gateways)
	}
	host, rport, _ := net.SplitHostPort(cfg.Redis.Addr)
	if at(services, host) == nil || rport != "6379" || at(services, host, "image") == nil {
		t.Errorf("[redis] addr %q is not the compose service %q on Redis's port", cfg.Redis.Addr, host)
	}

	lb := at(services, "haproxy")
	if !slices.Contains(strs(at(lb, "volumes")), "./haproxy.cfg:/usr/local/etc/haproxy/haproxy.cfg:ro") {
		t.Fatalf("haproxy does not mount haproxy.cfg: %q", strs(at(lb, "volumes")))
	}
	hb, err := os.ReadFile("haproxy.cfg")
	if err != nil {
		t.Fatal(err)
	}
	var servers []string
	var bind string
	health := false
	for line := range strings.Lines(string(hb)) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "server":
			if port(t, f[2]) != listen {
				t.Errorf("haproxy server %s: port of %q is not the listen port %d", f[1], f[2], listen)
			}
			h, _, _ := net.SplitHostPort(f[2])
			servers = append(servers, h)
		case len(f) == 2 && f[0] == "bind":
			bind = f[1]
		case slices.Equal(f, []string{"option", "httpchk", "GET", "/readyz"}):
			health = true
		case len(f) > 1 && f[0] == "default-server" && !slices.Contains(f, "check"):
			t.Error("haproxy default-server does not check the servers")
		}
	}
	if slices.Sort(servers); !slices.Equal(servers, gateways) {
		t.Errorf("haproxy servers %q, compose gateways %q", servers, gateways)
	}
	if !health {
		t.Error("haproxy does not health-check GET /readyz")
	}
	if pub := strs(at(lb, "ports")); len(pub) != 1 || !strings.HasSuffix(pub[0], ":"+strings.TrimPrefix(bind, ":")) {
		t.Errorf("haproxy publishes %q but binds %q", pub, bind)
	}
}

func TestKubernetes(t *testing.T) {
	cfg, raw, vars := deployConfig(t)
	objs := map[string]map[string]any{}  // the gateway's, by kind
	redis := map[string]map[string]any{} // the Redis it shares state through, by kind
	files, _ := filepath.Glob("kubernetes/*.yaml")
	var resources []string
	for _, f := range files {
		for _, d := range decodeYAML(t, f) {
			kind := str(at(d, "kind"))
			if kind == "Kustomization" {
				resources = strs(at(d, "resources"))
				continue
			}
			into := objs
			if str(at(d, "metadata", "labels", "app.kubernetes.io/name")) == "redis" {
				into = redis
			}
			if into[kind] != nil {
				t.Fatalf("two %s objects", kind)
			}
			into[kind] = d
		}
	}
	var want []string
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" {
			want = append(want, b)
		}
	}
	if slices.Sort(resources); !slices.Equal(resources, want) {
		t.Errorf("kustomization resources %q, files %q", resources, want)
	}
	for _, kind := range []string{"Deployment", "Service", "ConfigMap", "Secret", "PodDisruptionBudget", "HorizontalPodAutoscaler"} {
		if objs[kind] == nil {
			t.Fatalf("no %s", kind)
		}
	}
	// The Redis [redis] addr names is deployed beside: its Service's name
	// and port, serving the Redis pod's port.
	if redis["Deployment"] == nil || redis["Service"] == nil {
		t.Fatal("no Redis Deployment and Service")
	}
	host, _, _ := strings.Cut(cfg.Redis.Addr, ":")
	rsvc, rpod := redis["Service"], at(redis["Deployment"], "spec", "template", "spec", "containers", 0)
	if p, _ := at(rsvc, "spec", "ports", 0, "port").(int); str(at(rsvc, "metadata", "name")) != host || p != port(t, cfg.Redis.Addr) {
		t.Errorf("the Redis Service is %s:%d, the config reaches %s", str(at(rsvc, "metadata", "name")), p, cfg.Redis.Addr)
	}
	if tp := str(at(rsvc, "spec", "ports", 0, "targetPort")); str(at(rpod, "ports", 0, "name")) != tp {
		t.Errorf("the Redis Service targets %q, the pod names its port %q", tp, str(at(rpod, "ports", 0, "name")))
	}
	if !maps.Equal(at(rsvc, "spec", "selector").(map[string]any), at(redis["Deployment"], "spec", "template", "metadata", "labels").(map[string]any)) {
		t.Error("the Redis Service selector does not match the Redis pod")
	}
	// Redis asks for the password the gateway sends ([redis] password), from
	// the Secret, and reads no other secret.
	ref := at(rpod, "env", 0, "valueFrom", "secretKeyRef")
	if want := strings.Trim(strings.TrimPrefix(cfg.Redis.Password, "test-"), ""); str(at(ref, "key")) != "REDIS_PASSWORD" || want != "redis_password" ||
		str(at(ref, "name")) != str(at(objs["Secret"], "metadata", "name")) || at(rpod, "envFrom") != nil {
		t.Errorf("the Redis pod reads %v (envFrom %v), the gateway's password is %q", ref, at(rpod, "envFrom"), cfg.Redis.Password)
	}

	dep := objs["Deployment"]
	name := str(at(dep, "metadata", "name"))
	pod := at(dep, "spec", "template", "spec")
	labels := at(dep, "spec", "template", "metadata", "labels")
	c := at(pod, "containers", 0)

	// Config: the ConfigMap holds config.toml, mounted where -config reads it.
	path := configPath(t, "deployment", strs(at(c, "command")))
	cm := objs["ConfigMap"]
	if got := str(at(cm, "data", filepath.Base(path))); got != string(raw) {
		t.Errorf("ConfigMap data %q differs from deploy/config.toml", filepath.Base(path))
	}
	mount := at(c, "volumeMounts", 0)
	vol := at(pod, "volumes", 0)
	if str(at(mount, "mountPath")) != filepath.Dir(path) || str(at(mount, "name")) != str(at(vol, "name")) ||
		str(at(vol, "configMap", "name")) != str(at(cm, "metadata", "name")) {
		t.Errorf("the ConfigMap is not mounted at %s", filepath.Dir(path))
	}
	// Secrets: every ${NAME} the config reads comes from the Secret.
	sec := objs["Secret"]
	if str(at(c, "envFrom", 0, "secretRef", "name")) != str(at(sec, "metadata", "name")) {
		t.Error("the container does not read the Secret")
	}
	if got := keys(at(sec, "stringData")); !slices.Equal(got, vars) {
		t.Errorf("Secret keys %q, the config reads %q", got, vars)
	}

	// Ports and probes agree with the listeners.
	ports := map[string]int{}
	for i := range len(strs(at(c, "ports"))) {
		p := at(c, "ports", i)
		n, _ := at(p, "containerPort").(int)
		ports[str(at(p, "name"))] = n
	}
	listen, metrics := port(t, cfg.Server.Listen), port(t, cfg.Server.MetricsListen)
	if ports["http"] != listen || ports["metrics"] != metrics {
		t.Errorf("container ports %v, config listens on %d and %d", ports, listen, metrics)
	}
	for probe, wantPath := range map[string]string{"readinessProbe": "/readyz", "livenessProbe": "/healthz"} {
		g := at(c, probe, "httpGet")
		if str(at(g, "path")) != wantPath || ports[str(at(g, "port"))] == 0 {
			t.Errorf("%s: %v, want %s on a declared port", probe, g, wantPath)
		}
	}
	svc := objs["Service"]
	if tp := str(at(svc, "spec", "ports", 0, "targetPort")); ports[tp] != listen {
		t.Errorf("Service targets %q, not the listen port", tp)
	}
	if !maps.Equal(at(svc, "spec", "selector").(map[string]any), labels.(map[string]any)) {
		t.Error("Service selector does not match the pods")
	}

	// SIGTERM grace: preStop (if any), then shutdown_delay,
	// shutdown_timeout and the final error events, before SIGKILL.
	grace, _ := at(pod, "terminationGracePeriodSeconds").(int)
	pre, _ := at(c, "lifecycle", "preStop", "sleep", "seconds").(int)
	if need := sigtermGrace(cfg) + time.Duration(pre)*time.Second; time.Duration(grace)*time.Second < need {
		t.Errorf("terminationGracePeriodSeconds %d is not preStop %ds + shutdown_delay %v + shutdown_timeout %v + 5 s (the final error events)", grace, pre, cfg.Server.ShutdownDelay.D(), cfg.Server.ShutdownTimeout.D())
	}
	if cfg.Server.ShutdownDelay.D() == 0 && pre == 0 {
		t.Error("neither server.shutdown_delay nor a preStop sleep: requests sent while the endpoints drop the pod are refused")
	}
	for _, r := range []string{"cpu", "memory"} {
		if str(at(c, "resources", "requests", r)) == "" {
			t.Errorf("no %s request", r)
		}
	}

	pdb := objs["PodDisruptionBudget"]
	replicas, _ := at(dep, "spec", "replicas").(int)
	if minAvail, _ := at(pdb, "spec", "minAvailable").(int); minAvail < 1 || minAvail >= replicas {
		t.Errorf("PDB minAvailable %d with %d replicas", minAvail, replicas)
	}
	if !maps.Equal(at(pdb, "spec", "selector", "matchLabels").(map[string]any), labels.(map[string]any)) {
		t.Error("PDB selector does not match the pods")
	}
	hpa := objs["HorizontalPodAutoscaler"]
	if str(at(hpa, "spec", "scaleTargetRef", "kind")) != "Deployment" || str(at(hpa, "spec", "scaleTargetRef", "name")) != name ||
		str(at(hpa, "spec", "metrics", 0, "resource", "name")) != "cpu" {
		t.Errorf("HPA does not scale the Deployment on CPU: %v", at(hpa, "spec"))
	}
	if minR, _ := at(hpa, "spec", "minReplicas").(int); minR < 2 {
		t.Errorf("HPA minReplicas %d: one replica is no longer several", minR)
	}
}

// TestHAProxyConfigValid: the real haproxy accepts haproxy.cfg.
func TestHAProxyConfigValid(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("haproxy not installed: skipping (install haproxy to run this test)")
	}
	if out, err := exec.Command(bin, "-c", "-f", "haproxy.cfg").CombinedOutput(); err != nil {
		t.Fatalf("haproxy -c: %v\n%s", err, out)
	}
}

// sigtermGrace is what a replica of cfg needs between SIGTERM and SIGKILL:
// it serves for shutdown_delay, lets streams finish for shutdown_timeout,
// then gives those still running up to 2 s to write their error event
// (5 s of margin).
func sigtermGrace(cfg *config.Config) time.Duration {
	return cfg.Server.ShutdownDelay.D() + cfg.Server.ShutdownTimeout.D() + 5*time.Second
}
