package limits

import (
	"bufio"
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// fakeRedis answers every script call with reply and any other command with
// OK: a store in front of Redis (or another program's script) that answers
// otherwise than the take script does.
func fakeRedis(t *testing.T, reply string) string {
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
						_, err = c.Write([]byte(reply))
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
