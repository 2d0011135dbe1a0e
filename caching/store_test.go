package caching

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestMemoryStoreBoundByBytes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		max      int64
		valSize  int
		inserts  int
		wantLast bool // the last inserted value is readable
	}{
		{name: "many small", max: 10_000, valSize: 100, inserts: 1000, wantLast: true},
		{name: "few large", max: 10_000, valSize: 3000, inserts: 20, wantLast: true},
		{name: "value over the bound is not stored", max: 1000, valSize: 2000, inserts: 3, wantLast: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := NewMemoryStore(tt.max)
			ctx := context.Background()
			val := make([]byte, tt.valSize)
			for i := range tt.inserts {
				if err := s.Set(ctx, fmt.Sprintf("k%04d", i), val, time.Minute); err != nil {
					t.Fatal(err)
				}
				if s.Bytes() > tt.max {
					t.Fatalf("after %d inserts the store holds %d bytes > %d", i+1, s.Bytes(), tt.max)
				}
			}
			_, ok, _ := s.Get(ctx, fmt.Sprintf("k%04d", tt.inserts-1))
			if ok != tt.wantLast {
				t.Errorf("last value present = %v, want %v", ok, tt.wantLast)
			}
			if _, ok, _ := s.Get(ctx, "k0000"); ok && tt.inserts*tt.valSize > int(tt.max) {
				t.Error("the oldest value survived past the bound")
			}
		})
	}
}

func TestMemoryStoreLRUAndTTL(t *testing.T) {
	t.Parallel()
	clk := newClock()
	s := NewMemoryStore(3 * entrySize("k1", make([]byte, 10)))
	s.now = clk.Now
	ctx := context.Background()
	v := make([]byte, 10)
	for _, k := range []string{"k1", "k2", "k3"} {
		_ = s.Set(ctx, k, v, time.Minute)
	}
	if _, ok, _ := s.Get(ctx, "k1"); !ok { // k1 becomes the most recent
		t.Fatal("k1 missing")
	}
	_ = s.Set(ctx, "k4", v, time.Minute) // evicts k2, the least recent
	if _, ok, _ := s.Get(ctx, "k2"); ok {
		t.Error("k2 should have been evicted")
	}
	if _, ok, _ := s.Get(ctx, "k1"); !ok {
		t.Error("k1 should have survived")
	}
	_ = s.Set(ctx, "k1", []byte("replaced"), time.Second) // replace keeps the accounting exact
	if got, _, _ := s.Get(ctx, "k1"); string(got) != "replaced" {
		t.Errorf("k1 = %q", got)
	}
	clk.Advance(2 * time.Second)
	if _, ok, _ := s.Get(ctx, "k1"); ok {
		t.Error("k1 should have expired")
	}
	if _, ok, _ := s.Get(ctx, "k4"); !ok {
		t.Error("k4 expired early")
	}
	if want := 2 * entrySize("k1", v); s.Bytes() != want { // k3, k4
		t.Errorf("bytes = %d, want %d", s.Bytes(), want)
	}
}

// An entry stored under a longer ttl than the one configured now (a reload
// lowered it; Redis kept the entry) is stale; one within the ttl is fresh,
// until its own expiry.
func TestEntryHonoursALoweredTTL(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	e := encodeEntry([]byte(`{"id":"x"}`), now.Add(10*time.Minute))
	if _, ok := decodeEntry(e, now, 10*time.Minute); !ok {
		t.Fatal("an entry within the ttl is stale")
	}
	if _, ok := decodeEntry(e, now, 2*time.Second); ok {
		t.Fatal("an entry stored for 10 minutes is fresh under a ttl of 2 s")
	}
	if _, ok := decodeEntry(e, now.Add(-3*time.Second), 10*time.Minute); !ok {
		t.Fatal("a fresh entry read by a replica whose clock is 3 s behind is stale")
	}
	if _, ok := decodeEntry(e, now.Add(9*time.Minute+59*time.Second), 2*time.Second); !ok {
		t.Fatal("an entry due to expire within the new ttl is stale")
	}
	if _, ok := decodeEntry(e, now.Add(10*time.Minute), time.Hour); ok {
		t.Fatal("an expired entry is fresh")
	}
}
