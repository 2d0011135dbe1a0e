package gateway

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/mockllm"
)

// scaleConfig uses every Redis-backed feature at once: the response cache,
// mixed-turn state (the calculator is a server tool), stored responses,
// rate limits and a budget. sk-client is tenant "free"; sk-team is tenant
// "team", whose every request checks three counters in one script (its own
// limit, the global one, its budget).
const scaleConfig = baseConfig + `
[[tools]]
name = "calculator"
kind = "builtin"
[middleware.cache]
enabled = true
store = "redis"
[[keys]]
name = "free-key"
tenant = "free"
key = "sk-client"
[[keys]]
name = "team-key"
tenant = "team"
key = "sk-team"
[[limits]]
tenant = "team"
requests_per_minute = 5
[[limits]]
requests_per_minute = 100000
[[budgets]]
tenant = "team"
amount = 100.0
`

// slowMachine is the [redis] timeout of these tests: what they check must
// not depend on a TLS handshake or a cluster round trip finishing within
// the default 200ms on a loaded test machine. Failing over is not slowed by
// it: a dead master refuses connections at once.
const slowMachine = "timeout = \"2s\"\n"

// scaleResponder runs the mixed turn when the client brings lookup_city,
// else answers with the call's number (so a cached answer shows).
func scaleResponder(c *mockllm.Call) mockllm.Turn {
	if strings.Contains(string(c.Body), "lookup_city") {
		return mixedResponder(c)
	}
	return numbered(c)
}

// replica starts another in-process gateway with toml over h's mock.
func (h *harness) replica(toml string) *harness {
	h.t.Helper()
	cfg, err := config.Parse([]byte(strings.ReplaceAll(toml, "{{MOCK}}", h.mockURL)))
	if err != nil {
		h.t.Fatalf("config: %v", err)
	}
	r := &harness{t: h.t, mock: h.mock, mockURL: h.mockURL}
	r.srv = r.start(cfg)
	return r
}

// checkSharedState proves every Redis-backed feature works between the
// replicas a and b: a cached answer, a mixed turn, a stored response and a
// rate limit made on one are seen by the other.
func checkSharedState(t *testing.T, a, b *harness, tag string) {
	t.Helper()
	ctx := context.Background()
	if _, hv := a.chat(det("cache " + tag)); hv != "miss" {
		t.Fatalf("cache fill: %q", hv)
	}
	if _, hv := b.chat(det("cache " + tag)); hv != "hit" {
		t.Fatalf("cache on the other replica: %q (want hit)", hv)
	}

	// Two mixed turns, each started on a and continued on b: the second
	// follow-up loads both turns' state in one round trip, from two slots.
	p := userMsg("go " + tag)
	p.Tools = cityTool()
	want := "user assistant(calculator,lookup_city) tool tool"
	for turn := range 2 {
		msg := streamMessage(t, a.client, p)
		if len(msg.ToolCalls) != 1 || msg.ToolCalls[0].Function.Name != "lookup_city" {
			t.Fatalf("mixed turn %d: %+v", turn, msg.ToolCalls)
		}
		p = followUp(p, msg)
		resp, err := b.client.Chat.Completions.New(ctx, p)
		if err != nil {
			t.Fatalf("mixed follow-up %d on the other replica: %v", turn, err)
		}
		reqs := a.mock.Requests()
		if got := upstreamShape(reqs[len(reqs)-1].Body); got != want {
			t.Fatalf("upstream history of follow-up %d: %q, want %q", turn, got, want)
		}
		if c := resp.Choices[0].Message.Content; !strings.Contains(c, `"result":42`) {
			t.Fatalf("mixed answer %d %q", turn, c)
		}
		p.Messages = append(p.Messages, resp.Choices[0].Message.ToParam(), openai.UserMessage("again "+tag))
		want += " assistant() user assistant(calculator,lookup_city) tool tool"
	}

	first, err := a.client.Responses.New(ctx, responses.ResponseNewParams{
		Model: "gpt-x", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("stored " + tag)}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.client.Responses.Get(ctx, first.ID, responses.ResponseGetParams{})
	if err != nil || got.OutputText() != first.OutputText() || got.OutputText() == "" {
		t.Fatalf("stored response on the other replica: %v %q", err, got.OutputText())
	}

	for i := range 5 {
		if status, _, body := chatRequest(t, []string{a.base, b.base}[i%2], "sk-team"); status != 200 {
			t.Fatalf("team request %d: %d %s", i, status, body)
		}
	}
	if status, _, body := chatRequest(t, b.base, "sk-team"); status != 429 {
		t.Fatalf("sixth team request: %d %s (want 429: the limit is shared)", status, body)
	}
}

// TestRedisCluster: two replicas on a three-master Redis Cluster share the
// cache, mixed-turn state, stored responses and limits. Keys spread over
// the masters; the limit counters a request takes together share a slot.
func TestRedisCluster(t *testing.T) {
	t.Parallel()
	cl := testredis.StartCluster(t)
	cfg := scaleConfig + fmt.Sprintf("[redis]\nmode = \"cluster\"\naddrs = [%q]\nprefix = \"cl:\"\n%s", cl.Addrs()[0], slowMachine)
	a := newHarness(t, cfg, mockllm.Options{Respond: scaleResponder})
	b := a.replica(cfg)
	checkSharedState(t, a, b, "cluster")

	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer rdb.Close()
	ctx := context.Background()
	var mu sync.Mutex                                     // ForEachMaster calls in parallel
	slots := map[bool]map[int64]bool{false: {}, true: {}} // by "is a limits key"
	err := rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		keys, err := n.Keys(ctx, "cl:*").Result()
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			slots[strings.HasPrefix(k, "cl:{limits}:")][n.ClusterKeySlot(ctx, k).Val()] = true
		}
		return err
	})
	// The cache, turn and response keys hash to slots of their own; the
	// limit counters a request takes together share one.
	if err != nil || len(slots[false]) < 2 {
		t.Fatalf("slots of the shared keys %v: %v (want them spread)", slots[false], err)
	}
	if len(slots[true]) != 1 {
		t.Fatalf("limit counters in slots %v, want one", slots[true])
	}
	// The usage record (written in batches after each call) lands there too.
	owner, err := rdb.MasterForKey(ctx, "{limits}")
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if keys, _ := owner.Keys(ctx, "cl:{limits}:usage:*").Result(); len(keys) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no usage record in the cluster")
		}
	}
}

// TestRedisSentinelFailover: a gateway on a Sentinel-managed master keeps
// answering every request while the master is killed and its replica
// promoted (Redis-backed features fail open meanwhile), then shares state
// through the new master.
func TestRedisSentinelFailover(t *testing.T) {
	t.Parallel()
	s := testredis.StartSentinel(t)
	// The first sentinel address is dead: the client tries the next.
	cfg := scaleConfig + fmt.Sprintf("[redis]\nmode = \"sentinel\"\naddrs = [\"127.0.0.1:%d\", %q]\nmaster_name = %q\nprefix = \"sn:\"\n"+slowMachine+
		"password = %q\nsentinel_password = %q\n", testredis.FreePort(t), s.Sentinel.Addr(), testredis.MasterName, testredis.Password, testredis.SentinelPassword)
	a := newHarness(t, cfg, mockllm.Options{Respond: scaleResponder})
	b := a.replica(cfg)

	var (
		mu       sync.Mutex
		failures []string
		served   int
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			h := []*harness{a, b}[w%2]
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				_, err := h.client.Chat.Completions.New(context.Background(), det(fmt.Sprintf("load %d", i%16)))
				mu.Lock()
				served++
				if err != nil {
					failures = append(failures, err.Error())
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	s.Master.Stop()
	s.WaitMaster(t, s.Replica.Addr())
	time.Sleep(300 * time.Millisecond) // load on the new master too
	close(stop)
	wg.Wait()
	if len(failures) > 0 || served == 0 {
		t.Fatalf("%d of %d requests failed during the failover: %v", len(failures), served, failures[:min(3, len(failures))])
	}
	checkSharedState(t, a, b, "after failover")
	rdb := redis.NewClient(&redis.Options{Addr: s.Replica.Addr(), Password: testredis.Password})
	defer rdb.Close()
	if keys, err := rdb.Keys(context.Background(), "sn:*").Result(); err != nil || len(keys) == 0 {
		t.Fatalf("keys on the promoted master: %v %v", keys, err)
	}
}

// TestRedisTLS: with [redis.tls] the gateway reaches a redis-server that
// speaks only TLS and requires a client certificate; without the client
// certificate it cannot, and the cache is bypassed (fails open).
func TestRedisTLS(t *testing.T) {
	t.Parallel()
	rs := testredis.StartTLS(t)
	tlsConf := fmt.Sprintf("[redis]\naddr = %q\n"+slowMachine+"[redis.tls]\nenabled = true\nca_file = %q\n", rs.Addr(), rs.CAFile)
	h := newHarness(t, cacheConfig+"store = \"redis\"\n"+tlsConf+fmt.Sprintf("cert_file = %q\nkey_file = %q\n", rs.CertFile, rs.KeyFile),
		mockllm.Options{Respond: numbered})
	if _, hv := h.chat(det("tls")); hv != "miss" {
		t.Fatalf("fill over TLS: %q", hv)
	}
	if _, hv := h.chat(det("tls")); hv != "hit" {
		t.Fatalf("hit over TLS: %q", hv)
	}
	anon := newHarness(t, cacheConfig+"store = \"redis\"\n"+tlsConf, mockllm.Options{Respond: numbered})
	if _, hv := anon.chat(det("tls")); hv != "bypass" {
		t.Fatalf("without a client certificate: %q, want bypass", hv)
	}
}

// TestRedisTLSFiles: unreadable TLS files fail the build, naming the key.
func TestRedisTLSFiles(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, tls, want string }{
		{"ca file missing", fmt.Sprintf("ca_file = %q\n", missing), "redis.tls.ca_file"},
		{"ca file not PEM", fmt.Sprintf("ca_file = %q\n", notPEM), "redis.tls.ca_file: no PEM certificate"},
		{"client pair missing", fmt.Sprintf("cert_file = %q\nkey_file = %q\n", missing, missing), "redis.tls.cert_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg, err := config.Parse([]byte("[redis]\naddr = \"127.0.0.1:1\"\n[redis.tls]\nenabled = true\n" + tc.tls))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := Build(cfg, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("build: %v, want %q", err, tc.want)
			}
		})
	}
}

// TestRedisClusterFollowsFailover: when a cluster master dies and its
// replica takes over its slots, the gateway's client follows within
// moments; go-redis alone keeps its map of slots to nodes, and so fails
// every call for those slots on the dead master, until its periodic reload
// a minute later, since a dead master sends no MOVED. A call while the
// master is down is bounded by the configured timeout.
func TestRedisClusterFollowsFailover(t *testing.T) {
	t.Parallel()
	cl := testredis.StartReplicatedCluster(t)
	rdb, err := redisClient(&config.Redis{Mode: "cluster", Addrs: cl.Addrs()[:2], Timeout: config.Duration(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rdb.Close() })
	const key = "fo:{limits}:probe"
	set := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		return rdb.Set(ctx, key, "v", 0).Err()
	}
	if err := set(); err != nil {
		t.Fatal(err)
	}
	master := slotMaster(t, rdb.(*redis.ClusterClient), key)
	node := cl.Node(master)
	if node == nil {
		t.Fatalf("no node at %s", master)
	}
	node.Stop()
	// While it is down and not yet replaced, a call fails within its bound.
	start := time.Now()
	if err := set(); err == nil {
		t.Fatal("a call to a dead master succeeded")
	} else if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a call to a dead master took %v", d)
	}
	// A survivor names the promoted replica.
	var survivor string
	for _, a := range cl.Addrs() {
		if a != master {
			survivor = a
			break
		}
	}
	direct := redis.NewClient(&redis.Options{Addr: survivor, MaxRetries: -1})
	t.Cleanup(func() { _ = direct.Close() })
	slot := int(direct.ClusterKeySlot(context.Background(), key).Val())
	promoted := time.Now().Add(20 * time.Second)
	for time.Now().Before(promoted) {
		if m := ownerOf(direct, slot); m != "" && m != master {
			break
		}
		_ = set() // traffic meanwhile, as a gateway's
		time.Sleep(100 * time.Millisecond)
	}
	if m := ownerOf(direct, slot); m == "" || m == master {
		t.Fatalf("the replica was not promoted: owner %q", m)
	}
	// The client follows at once (go-redis's own reload comes after a minute).
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := set()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after the promotion the client still fails: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// slotMaster is the address of the master that holds key's slot.
func slotMaster(t *testing.T, c *redis.ClusterClient, key string) string {
	t.Helper()
	var addr string
	err := c.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		if n, err := m.Exists(ctx, key).Result(); err == nil && n == 1 {
			addr = m.Options().Addr
		}
		return nil
	})
	if err != nil || addr == "" {
		t.Fatalf("no master holds %s: %v", key, err)
	}
	return addr
}

// ownerOf is the address of the master slot is assigned to in rdb's view,
// "" when it cannot say.
func ownerOf(rdb *redis.Client, slot int) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	shards, err := rdb.ClusterShards(ctx).Result()
	if err != nil {
		return ""
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int64(slot) < r.Start || int64(slot) > r.End {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" && n.Health == "online" {
					return n.IP + ":" + strconv.FormatInt(n.Port, 10)
				}
			}
		}
	}
	return ""
}
