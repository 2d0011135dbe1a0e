package caching

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/llmgw/gateway/internal/testredis"
)

// A value in Redis longer than the store's bound is a miss, never read: a
// shared or compromised Redis cannot make the gateway allocate it. Values
// up to the bound (the empty one included) read back as before. Not
// parallel: it measures the process's allocations.
func TestRedisStoreBoundsReads(t *testing.T) {
	srv := testredis.Start(t)
	client := srv.Client(t)
	const bound = 1 << 20
	s := NewRedisStore(client, "test:", 5*time.Second, MaxValueBytes(bound))
	ctx := context.Background()

	for _, n := range []int{0, 1, bound} {
		val := bytes.Repeat([]byte{'v'}, n)
		if err := s.Set(ctx, "ok", val, time.Minute); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := s.Get(ctx, "ok"); !ok || err != nil || !bytes.Equal(got, val) {
			t.Fatalf("%d-byte value: ok=%v err=%v len=%d", n, ok, err, len(got))
		}
	}
	if _, ok, err := s.Get(ctx, "absent"); ok || err != nil {
		t.Fatalf("absent: ok=%v err=%v", ok, err)
	}
	if err := client.LPush(ctx, "test:list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := s.Get(ctx, "list"); ok || err == nil {
		t.Fatalf("a key of another type: ok=%v err=%v, want an error as GET gives", ok, err)
	}

	// One byte over the bound: a miss, counted.
	before := counterValue(oversizedReads)
	if err := client.Set(ctx, "test:over", bytes.Repeat([]byte{'v'}, bound+1), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Get(ctx, "over"); ok || err != nil || v != nil {
		t.Fatalf("value one byte over the bound: ok=%v err=%v len=%d, want a miss", ok, err, len(v))
	}
	if got := counterValue(oversizedReads) - before; got != 1 {
		t.Errorf("oversized reads counted %v, want 1", got)
	}

	// Far over the bound, written behind the store's back: a miss that
	// does not allocate the value.
	const huge = 32 << 20
	if err := client.Set(ctx, "test:huge", bytes.Repeat([]byte{'x'}, huge), 0).Err(); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	v, ok, err := s.Get(ctx, "huge")
	runtime.ReadMemStats(&m1)
	if ok || err != nil || v != nil {
		t.Fatalf("huge value: ok=%v err=%v len=%d, want a miss", ok, err, len(v))
	}
	if d := m1.TotalAlloc - m0.TotalAlloc; d > huge/2 {
		t.Errorf("reading a %d-byte value over the bound allocated %d bytes", huge, d)
	}

	// GetMax: a tighter bound per call; the store's default bound applies
	// without the option.
	if _, ok, _ := s.GetMax(ctx, "ok", bound-1); ok {
		t.Error("GetMax returned a value over its limit")
	}
	if got := NewRedisStore(client, "", time.Second).maxValue; got != DefaultMaxValueBytes {
		t.Errorf("default bound %d, want %d", got, DefaultMaxValueBytes)
	}
}

// decodeEntry never panics, and what it returns is the tail of its input.
func FuzzDecodeEntry(f *testing.F) {
	now := time.UnixMilli(1_700_000_000_000)
	f.Add(encodeEntry([]byte(`{"choices":[]}`), now.Add(time.Minute)))
	f.Add(encodeEntry([]byte(`x`), now.Add(-time.Minute)))
	f.Add([]byte{entryVersion})
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, entryHeader+1))
	f.Fuzz(func(t *testing.T, e []byte) {
		c, ok := decodeEntry(e, now, time.Hour)
		if ok && (len(e) <= entryHeader || !bytes.Equal(c, e[entryHeader:])) {
			t.Fatalf("decodeEntry(%q) = %q", e, c)
		}
		if !ok && c != nil {
			t.Fatalf("a refused entry returned %q", c)
		}
	})
}
