package testredis

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinel of StartSentinel monitors.
const MasterName = "gwmaster"

// Sentinel is a master, one replica of it, and one sentinel watching them
// that fails over within about a second of the master's death.
type Sentinel struct {
	Master, Replica, Sentinel *Server
}

// StartSentinel runs the setup until the test ends; it skips the test when
// redis-server or redis-sentinel is missing.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin, sbin := lookPath(t, "redis-server"), lookPath(t, "redis-sentinel")
	s := &Sentinel{Master: newServer(t, bin)}
	s.Replica = newServer(t, bin, "--replicaof", "127.0.0.1", fmt.Sprint(s.Master.Port))
	parallel([]*Server{s.Master, s.Replica}, (*Server).launch)
	parallel([]*Server{s.Master, s.Replica}, (*Server).wait)
	waitFor(t, "the replica's link to the master", func(ctx context.Context, rdb *redis.Client) bool {
		info, err := rdb.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, s.Replica.Addr())

	// The sentinel rewrites its config file, so it gets one of its own.
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel down-after-milliseconds %[1]s 300\n"+
		"sentinel failover-timeout %[1]s 2000\n", MasterName, s.Master.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Sentinel = newServer(t, sbin)
	s.Sentinel.conf = conf
	s.Sentinel.Start()
	// Failover needs the sentinel to know the replica (from the master's INFO).
	waitFor(t, "the sentinel to see the replica", func(ctx context.Context, rdb *redis.Client) bool {
		reps, err := rdb.Do(ctx, "SENTINEL", "REPLICAS", MasterName).Slice()
		return err == nil && len(reps) == 1
	}, s.Sentinel.Addr())
	return s
}

// WaitMaster waits until the sentinel names addr as the master.
func (s *Sentinel) WaitMaster(t testing.TB, addr string) {
	t.Helper()
	waitFor(t, "the sentinel to name "+addr+" master", func(ctx context.Context, rdb *redis.Client) bool {
		got, err := rdb.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName).StringSlice()
		return err == nil && len(got) == 2 && got[0]+":"+got[1] == addr
	}, s.Sentinel.Addr())
}
