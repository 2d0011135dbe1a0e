package testredis

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of three masters (and, started by
// StartReplicatedCluster, a replica of each) on loopback ports, created
// with redis-cli --cluster create.
type Cluster struct {
	Nodes []*Server
}

// StartCluster runs a three-master cluster until the test ends; it skips
// the test when redis-server or redis-cli is missing.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	return startCluster(t, 0)
}

// StartReplicatedCluster runs three masters with a replica each, which
// takes over its master's slots when the master dies (Stop).
func StartReplicatedCluster(t testing.TB) *Cluster {
	t.Helper()
	c := startCluster(t, 1)
	for _, n := range c.Nodes {
		waitFor(t, "a replica of every master on "+n.Addr(), func(ctx context.Context, rdb *redis.Client) bool {
			info, err := rdb.Info(ctx, "replication").Result()
			return err == nil && (strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") ||
				strings.Contains(info, "role:master") && strings.Contains(info, "connected_slaves:1"))
		}, n.Addr(), "")
	}
	return c
}

// Node returns the node at addr, nil when there is none.
func (c *Cluster) Node(addr string) *Server {
	for _, n := range c.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

func startCluster(t testing.TB, replicas int) *Cluster {
	t.Helper()
	bin, cli := lookPath(t, "redis-server"), lookPath(t, "redis-cli")
	dir := t.TempDir()
	c := &Cluster{}
	for i := range 3 * (1 + replicas) {
		// The bus port is chosen too: the default (port+10000) may be taken.
		c.Nodes = append(c.Nodes, newServer(t, bin, "--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes-"+strconv.Itoa(i)+".conf"),
			"--cluster-port", strconv.Itoa(FreePort(t)), "--cluster-node-timeout", "2000"))
	}
	parallel(c.Nodes, (*Server).launch)
	parallel(c.Nodes, (*Server).wait)
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	// Every node must know every slot's owner before a client uses it.
	for _, n := range c.Nodes {
		waitFor(t, "cluster_state:ok on "+n.Addr(), func(ctx context.Context, rdb *redis.Client) bool {
			info, err := rdb.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes)))
		}, n.Addr(), "")
	}
	return c
}

// Addrs lists the nodes' host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// parallel runs f on every server at once: starting redis processes one
// after the other would add their start-up times.
func parallel(servers []*Server, f func(*Server)) {
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Go(func() { f(s) })
	}
	wg.Wait()
}

// waitFor polls ok with a client of addr (authenticated with password
// unless "") until it holds, for up to 15 s.
func waitFor(t testing.TB, what string, ok func(context.Context, *redis.Client) bool, addr, password string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		done := ok(ctx, rdb)
		cancel()
		if done {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
