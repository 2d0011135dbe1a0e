package toolloop

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testredis"
)

// A stored turn longer than the store's bound is a miss, never read: a
// shared or compromised Redis cannot make the gateway allocate it. A turn
// within the bound round-trips; Save refuses one Load would not read. Not
// parallel: it measures the process's allocations.
func TestRedisStateBoundsReads(t *testing.T) {
	srv := testredis.Start(t)
	client := srv.Client(t)
	const bound = 1 << 20
	s := NewRedisState(client, "test:turn:", time.Minute, RedisStateMaxBytes(bound))
	ctx := context.Background()

	// A normal turn round-trips, next to a key never saved.
	want := &HiddenTurn{
		Prior:       []byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_0","type":"function","function":{"name":"calculator","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_0","content":"{\"status\":\"ok\"}"}`),
		Assistant:   []byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"call_s","type":"function","function":{"name":"calculator","arguments":"{}"}},{"id":"call_c","type":"function","function":{"name":"client_tool","arguments":"{}"}}]}`),
		ToolResults: [][]byte{[]byte(`{"role":"tool","tool_call_id":"call_s","content":"{\"status\":\"ok\",\"data\":2}"}`)},
		ClientIDs:   []string{"call_c"},
		Saved:       time.UnixMilli(1_700_000_000_000),
	}
	if err := s.Save(ctx, "ok", want); err != nil {
		t.Fatal(err)
	}
	got, err := s.Load(ctx, []string{"absent", "ok"})
	if err != nil || len(got) != 2 {
		t.Fatalf("Load: %v, %d turns", err, len(got))
	}
	if got[0] != nil {
		t.Errorf("a key never saved loaded %+v", got[0])
	}
	if got[1] == nil || !reflect.DeepEqual(got[1], want) {
		t.Fatalf("round trip: got %+v, want %+v", got[1], want)
	}

	// A turn at the bound exactly is kept; one byte over, Save refuses it
	// (Load would not read it).
	at := turnOfSize(t, bound)
	if err := s.Save(ctx, "at", at); err != nil {
		t.Fatalf("a turn at the bound: %v", err)
	}
	if got, err := s.Load(ctx, []string{"at"}); err != nil || got[0] == nil {
		t.Fatalf("a turn at the bound did not load: %v", err)
	}
	if err := s.Save(ctx, "over", turnOfSize(t, bound+1)); !errors.Is(err, errTurnTooLarge) {
		t.Fatalf("Save of a turn one byte over the bound: %v, want errTurnTooLarge", err)
	}

	// A valid turn far over the bound, written behind the store's back: a
	// miss, counted, that does not allocate the value; the other keys of
	// the same Load still load.
	const huge = 32 << 20
	if err := client.Set(ctx, "test:turn:huge", encodeTurn(turnOfSize(t, huge)), 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(metricState.WithLabelValues("load_oversized"))
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	got, err = s.Load(ctx, []string{"huge", "ok"})
	runtime.ReadMemStats(&m1)
	if err != nil || len(got) != 2 {
		t.Fatalf("Load: %v, %d turns", err, len(got))
	}
	if got[0] != nil {
		t.Errorf("a %d-byte turn over the %d-byte bound loaded", huge, bound)
	}
	if d := m1.TotalAlloc - m0.TotalAlloc; d > huge/2 {
		t.Errorf("loading a %d-byte turn over the bound allocated %d bytes", huge, d)
	}
	if got[1] == nil || !reflect.DeepEqual(got[1], want) {
		t.Errorf("the turn loaded with an oversized one: got %+v", got[1])
	}
	if d := testutil.ToFloat64(metricState.WithLabelValues("load_oversized")) - before; d != 1 {
		t.Errorf("oversized loads counted %v, want 1", d)
	}

	// A key of another type fails the Load, as GET did.
	if err := client.LPush(ctx, "test:turn:list", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, []string{"list"}); err == nil {
		t.Error("a key holding a list loaded without an error")
	}

	// Without the option the bound is config's default state_max_bytes.
	if got, want := NewRedisState(client, "", time.Minute).maxBytes, config.Defaults().ToolLoop.StateMaxBytes; got != want {
		t.Errorf("default bound %d, want %d", got, want)
	}
}

// turnOfSize is a valid turn whose encoding is exactly n bytes long, padded
// in its prior rounds.
func turnOfSize(t *testing.T, n int) *HiddenTurn {
	t.Helper()
	ht := &HiddenTurn{Assistant: []byte(`{"role":"assistant"}`), ClientIDs: []string{"call_c"}, Saved: time.UnixMilli(1_700_000_000_000)}
	const open, end = `{"role":"user","content":"`, `"}`
	pad := n - len(encodeTurn(ht)) - len(open) - len(end)
	if pad < 0 {
		t.Fatalf("no turn of %d bytes", n)
	}
	ht.Prior = append(append([]byte(open), bytes.Repeat([]byte{'x'}, pad)...), end...)
	if got := len(encodeTurn(ht)); got != n {
		t.Fatalf("turn of %d bytes, want %d", got, n)
	}
	return ht
}
