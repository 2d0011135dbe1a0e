package limits

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeRedis answers every script call with reply and any other command with
// OK: a store in front of Redis (or another program's script) that answers
// otherwise than the take script does.
func fakeRedis(t *testing.T, reply string) string {
	return fakeRedisCounting(t, reply, nil)
}

// fakeRedisCounting is fakeRedis that counts the scripts it is sent in
// evals (when not nil) and, for an empty reply, never answers them.
func fakeRedisCounting(t *testing.T, reply string, evals *atomic.Int64) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					args, err := readCommand(r)
					if err != nil {
						return
					}
					switch strings.ToUpper(args[0]) {
					case "EVALSHA", "EVAL":
						if evals != nil {
							evals.Add(1)
						}
						if reply != "" {
							_, err = c.Write([]byte(reply))
						}
					case "HELLO":
						_, err = c.Write([]byte("-ERR unknown command 'HELLO'\r\n"))
					default:
						_, err = c.Write([]byte("+OK\r\n"))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, _ := strconv.Atoi(strings.TrimSpace(line[1:]))
	args := make([]string, 0, n)
	for range n {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil, err
		}
		v, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		args = append(args, strings.TrimSuffix(v, "\r\n"))
	}
	if len(args) == 0 {
		args = append(args, "")
	}
	return args, nil
}

// TestTakeRefusesAnOutOfRangeReply: a reply that names a check the request
// does not have is a store error (the limiter then fails open or closed as
// configured), never an index out of range that ends the process.
func TestTakeRefusesAnOutOfRangeReply(t *testing.T) {
	t.Parallel()
	for _, reply := range []string{
		"*4\r\n:99\r\n:0\r\n:1\r\n:1\r\n", // denied = check 98 of 1
		"*4\r\n:-5\r\n:0\r\n:1\r\n:1\r\n", // denied = -6
		"*2\r\n:0\r\n:0\r\n",              // too short
	} {
		rdb := redis.NewClient(&redis.Options{Addr: fakeRedis(t, reply), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		t.Cleanup(func() { _ = rdb.Close() })
		var out outcome
		err := NewRedisStore(rdb, 0).Take(context.Background(), time.Now(), "id", []check{{key: "k", kind: kindRate, limit: 10}}, 0, &out)
		if err == nil {
			t.Fatalf("reply %q: no error (denied %d)", reply, out.denied)
		}
	}
}

// A Redis that hangs (a stopped process) lets one check wait the timeout
// out; the checks of the next second fail at once, as the fail mode says,
// without asking it; after that one asks again.
func TestTakeSkipsAStalledRedis(t *testing.T) {
	t.Parallel()
	var evals atomic.Int64
	rdb := redis.NewClient(&redis.Options{Addr: fakeRedisCounting(t, "", &evals), DialTimeout: time.Second, ReadTimeout: 5 * time.Second,
		MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	st := NewRedisStore(rdb, 50*time.Millisecond)
	take := func(now time.Time) error {
		var out outcome
		return st.Take(context.Background(), now, "id", []check{{key: "k", kind: kindRate, limit: 10}}, 0, &out)
	}
	now := time.Now()
	if err := take(now); err == nil || errors.Is(err, errStalled) || evals.Load() == 0 {
		t.Fatalf("first check: %v after %d scripts, want the timeout", err, evals.Load())
	}
	asked := evals.Load()
	for _, later := range []time.Duration{0, 500 * time.Millisecond, 999 * time.Millisecond} {
		if err := take(now.Add(later)); !errors.Is(err, errStalled) || evals.Load() != asked {
			t.Fatalf("%v later: %v, %d scripts sent (%d before): want skipped", later, err, evals.Load(), asked)
		}
	}
	// After the pause, of the checks made together one asks Redis.
	var wg sync.WaitGroup
	var stalled atomic.Int64
	for range 8 {
		wg.Go(func() {
			if errors.Is(take(now.Add(stallPause)), errStalled) {
				stalled.Add(1)
			}
		})
	}
	wg.Wait()
	if evals.Load() != asked+1 || stalled.Load() != 7 {
		t.Fatalf("after the pause: %d scripts sent (%d before), %d checks skipped: want one asking", evals.Load(), asked, stalled.Load())
	}
}
