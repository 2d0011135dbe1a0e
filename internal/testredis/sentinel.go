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

// The master's name and the passwords of the StartSentinel setup.
const (
	MasterName       = "gwmaster"
	Password         = "data-secret"     // the master's and the replica's requirepass
	SentinelPassword = "sentinel-secret" // the sentinel's own requirepass
)

// Sentinel is a master, one replica of it, and one sentinel watching them
// that fails over within a few seconds of the master's death. Every
// process requires a password.
type Sentinel struct {
	Master, Replica, Sentinel *Server
}

// StartSentinel runs the setup until the test ends; it skips the test when
// redis-server or redis-sentinel is missing.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	bin, sbin := lookPath(t, "redis-server"), lookPath(t, "redis-sentinel")
	auth := []string{"--requirepass", Password, "--masterauth", Password}
	s := &Sentinel{Master: newServer(t, bin, auth...)}
	s.Replica = newServer(t, bin, append(auth, "--replicaof", "127.0.0.1", fmt.Sprint(s.Master.Port))...)
	parallel([]*Server{s.Master, s.Replica}, (*Server).launch)
	parallel([]*Server{s.Master, s.Replica}, (*Server).wait)
	waitFor(t, "the replica's link to the master", func(ctx context.Context, rdb *redis.Client) bool {
		info, err := rdb.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, s.Replica.Addr(), Password)

	// The sentinel rewrites its config file, so it gets one of its own.
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("requirepass %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\n"+
		"sentinel auth-pass %[2]s %[4]s\n"+
		"sentinel down-after-milliseconds %[2]s 300\n"+
		"sentinel failover-timeout %[2]s 2000\n", SentinelPassword, MasterName, s.Master.Port, Password)
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
	}, s.Sentinel.Addr(), SentinelPassword)
	return s
}

// WaitMaster waits until the sentinel names addr as the master.
func (s *Sentinel) WaitMaster(t testing.TB, addr string) {
	t.Helper()
	waitFor(t, "the sentinel to name "+addr+" master", func(ctx context.Context, rdb *redis.Client) bool {
		got, err := rdb.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MasterName).StringSlice()
		return err == nil && len(got) == 2 && got[0]+":"+got[1] == addr
	}, s.Sentinel.Addr(), SentinelPassword)
}
