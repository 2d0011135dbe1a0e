package responses

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/llmgw/gateway/caching"
	"github.com/llmgw/gateway/internal/testredis"
)

// A stored record over MaxBytes, written behind the store's back into a
// shared Redis, is not found, and is not read: Load asks Redis for at most
// MaxBytes. A record Save wrote still loads. Not parallel: it measures the
// process's allocations.
func TestStoreLoadBoundedInRedis(t *testing.T) {
	srv := testredis.Start(t)
	client := srv.Client(t)
	const maxBytes = 64 << 10
	s := &Store{KV: caching.NewRedisStore(client, "gw:", 5*time.Second), TTL: time.Minute, MaxBytes: maxBytes}
	ctx := context.Background()

	obj := []byte(`{"id":"resp_ok","output":[{"id":"msg_ok_0","type":"message","role":"assistant","content":[]}]}`)
	if ok, err := s.Save(ctx, "t", "resp_ok", obj, []byte(`[]`), []byte(`[{"role":"user","content":"q"}]`), []byte(`{"role":"assistant","content":"hi"}`)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if rec, found, err := s.Load(ctx, "t", "resp_ok"); !found || err != nil || rec.History.Get("1.content").Str != "hi" {
		t.Fatalf("saved record: found=%v err=%v history %s", found, err, rec.History.Raw)
	}

	// A valid record, too large for MaxBytes by far.
	const huge = 32 << 20
	big := make([]byte, 0, huge+64)
	big = append(big, `{"response":{"id":"resp_big","output":[]},"input":["`...)
	big = append(big, bytes.Repeat([]byte{'x'}, huge)...)
	big = append(big, `"],"history":[]}`...)
	if err := client.Set(ctx, "gw:"+key("t", "resp_big"), big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	big = nil
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	_, ok, err := s.Load(ctx, "t", "resp_big")
	runtime.ReadMemStats(&m1)
	if ok || err != nil {
		t.Fatalf("oversized record: found=%v err=%v, want a miss", ok, err)
	}
	if d := m1.TotalAlloc - m0.TotalAlloc; d > huge/2 {
		t.Errorf("loading a %d-byte record over MaxBytes allocated %d bytes", huge, d)
	}
	if it := resolved(t, s.Resolver(ctx, "t"), "msg_big_0"); it.Exists() {
		t.Error("an item of the oversized record resolved")
	}
}

// Load, the resolver and InputList never panic on whatever bytes the KV
// holds under a response's key.
func FuzzStoreLoad(f *testing.F) {
	f.Add([]byte(`{"response":{"id":"resp_a","output":[{"id":"msg_a_0","type":"message"}]},"input":[{"role":"user","content":"q"},{"type":"function_call_output","call_id":"c"}],"history":[]}`))
	f.Add([]byte(`{"response":1,"input":"x","history":null}`))
	f.Add([]byte(`{"input":[{"type":"x"},{"role":"assistant","content":"a"},1,"s",{}]}`))
	f.Add([]byte(`[`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, rec []byte) {
		ctx := context.Background()
		kv := caching.NewMemoryStore(1 << 20)
		s := &Store{KV: kv, MaxBytes: 1 << 10}
		_ = kv.Set(ctx, key("t", "resp_a"), rec, 0)
		r, ok, err := s.Load(ctx, "t", "resp_a")
		if err != nil {
			t.Fatal(err)
		}
		if ok && len(rec) > s.MaxBytes {
			t.Fatalf("a %d-byte record over MaxBytes loaded", len(rec))
		}
		if ok {
			_ = InputList("resp_a", r.Input, InputPage{After: "in_a_1"})
		}
		_ = resolved(t, s.Resolver(ctx, "t"), "msg_a_0")
	})
}
