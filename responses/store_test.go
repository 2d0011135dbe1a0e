package responses

import (
	"context"
	"strconv"
	"testing"

	"github.com/llmgw/gateway/caching"
)

// A record is read back only by its tenant, a record over MaxBytes is not
// kept, Delete removes it, and the resolver finds an output item by the id
// the encoder gave it.
func TestStore(t *testing.T) {
	ctx := context.Background()
	s := &Store{KV: caching.NewMemoryStore(1 << 20), MaxBytes: 600}
	obj := []byte(`{"id":"resp_x1","output":[{"id":"msg_x1_0","type":"message","role":"assistant","content":[]},{"id":"fc_x1_1","type":"function_call","call_id":"c","name":"f","arguments":"{}"}]}`)
	ok, err := s.Save(ctx, "a", "resp_x1", obj, []byte(`[]`), []byte(`[{"role":"user","content":"q"}]`), []byte(`{"role":"assistant","content":"hi"}`))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	rec, found, err := s.Load(ctx, "a", "resp_x1")
	if err != nil || !found || rec.History.Get("#").Int() != 2 || rec.History.Get("1.content").Str != "hi" {
		t.Fatalf("load: %v %v %s", found, err, rec.History.Raw)
	}
	if _, found, _ := s.Load(ctx, "b", "resp_x1"); found {
		t.Fatal("tenant b read tenant a's response")
	}
	if it := s.Resolver(ctx, "a")("fc_x1_1"); it.Get("call_id").Str != "c" {
		t.Fatalf("resolver: %s", it.Raw)
	}
	if it := s.Resolver(ctx, "b")("fc_x1_1"); it.Exists() {
		t.Fatal("tenant b resolved tenant a's item")
	}
	big := make([]byte, 700)
	for i := range big {
		big[i] = 'x'
	}
	if ok, _ := s.Save(ctx, "a", "resp_big", obj, []byte(`["`+string(big)+`"]`), []byte(`[]`), nil); ok {
		t.Fatal("a record over MaxBytes was kept")
	}
	if ok, err := s.Delete(ctx, "b", "resp_x1"); ok || err != nil {
		t.Fatal("tenant b deleted tenant a's response")
	}
	if ok, err := s.Delete(ctx, "a", "resp_x1"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, found, _ := s.Load(ctx, "a", "resp_x1"); found {
		t.Fatal("deleted response still there")
	}
}

// A request's references read each stored response once, and no more than
// maxReferenced distinct ones.
func TestResolverBoundsLoads(t *testing.T) {
	ctx := context.Background()
	kv := &countingKV{KV: caching.NewMemoryStore(1 << 20)}
	s := &Store{KV: kv}
	obj := []byte(`{"id":"resp_a","output":[{"id":"msg_a_0","type":"message"},{"id":"fc_a_1","type":"function_call"}]}`)
	if _, err := s.Save(ctx, "t", "resp_a", obj, []byte(`[]`), []byte(`[]`), nil); err != nil {
		t.Fatal(err)
	}
	resolve := s.Resolver(ctx, "t")
	for range 10 {
		if !resolve("msg_a_0").Exists() || !resolve("fc_a_1").Exists() {
			t.Fatal("a stored item did not resolve")
		}
	}
	if kv.gets != 1 {
		t.Fatalf("%d store reads for one referenced response", kv.gets)
	}
	for i := range 100 {
		resolve("msg_x" + strconv.Itoa(i) + "_0")
	}
	if kv.gets != maxReferenced {
		t.Fatalf("%d store reads, want at most %d", kv.gets, maxReferenced)
	}
}

type countingKV struct {
	KV
	gets int
}

func (c *countingKV) Get(ctx context.Context, key string) ([]byte, bool, error) {
	c.gets++
	return c.KV.Get(ctx, key)
}
