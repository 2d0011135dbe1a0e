package toolloop

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/internal/testredis"
	"github.com/llmgw/gateway/pipeline"
	"github.com/tidwall/gjson"
)

func testTurn(ids ...string) *HiddenTurn {
	t := &HiddenTurn{
		Prior:     []byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"p1","type":"function","function":{"name":"calculator","arguments":"{}"}}]},{"role":"tool","tool_call_id":"p1","content":"1"}`),
		Assistant: []byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"s1","type":"function","function":{"name":"calculator","arguments":"{}"}}`),
		ClientIDs: ids,
		Saved:     time.UnixMilli(1700000000000),
	}
	for _, id := range ids {
		t.Assistant = append(t.Assistant, `,{"id":"`+id+`","type":"function","function":{"name":"lookup","arguments":"{}"}}`...)
	}
	t.Assistant = append(t.Assistant, "]}"...)
	t.ToolResults = [][]byte{[]byte(`{"role":"tool","tool_call_id":"s1","content":"42"}`)}
	return t
}

// stateMaxBytes is tool_loop.state_max_bytes by default.
var stateMaxBytes = config.Defaults().ToolLoop.StateMaxBytes

func TestMemoryStateBounds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name        string
		maxEntries  int
		maxBytes    int
		saves       int
		wantEntries int
	}{
		{name: "entries bound", maxEntries: 50, maxBytes: stateMaxBytes, saves: 200, wantEntries: 50},
		{name: "bytes bound", maxEntries: 1000, maxBytes: 10 * testTurn("c").size(), saves: 200, wantEntries: 8},
		{name: "under bound", maxEntries: 1000, maxBytes: stateMaxBytes, saves: 20, wantEntries: 20},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := NewMemoryState(time.Hour, tc.maxEntries, tc.maxBytes)
			for i := 0; i < tc.saves; i++ {
				_ = m.Save(ctx, "k"+strconv.Itoa(i), testTurn("c"+strconv.Itoa(i)))
				if n, b := m.Len(); n > tc.maxEntries || (tc.maxBytes > 0 && b > tc.maxBytes) {
					t.Fatalf("after %d saves: %d entries, %d bytes", i+1, n, b)
				}
			}
			n, _ := m.Len()
			if tc.wantEntries == 8 {
				if n < 5 || n > 10 {
					t.Fatalf("entries %d", n)
				}
			} else if n != tc.wantEntries {
				t.Fatalf("entries %d, want %d", n, tc.wantEntries)
			}
			got, _ := m.Load(ctx, []string{"k0", "k" + strconv.Itoa(tc.saves-1)})
			if (got[0] != nil) != (n == tc.saves) || got[1] == nil {
				t.Fatalf("oldest kept=%v newest kept=%v", got[0] != nil, got[1] != nil)
			}
		})
	}
}

func TestMemoryStateTTL(t *testing.T) {
	t.Parallel()
	m := NewMemoryState(time.Minute, 10, stateMaxBytes)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	ctx := context.Background()
	_ = m.Save(ctx, "a", testTurn("x"))
	now = now.Add(59 * time.Second)
	if got, _ := m.Load(ctx, []string{"a"}); got[0] == nil {
		t.Fatal("dropped before its TTL")
	}
	now = now.Add(2 * time.Second)
	if got, _ := m.Load(ctx, []string{"a"}); got[0] != nil {
		t.Fatal("served after its TTL")
	}
	if n, b := m.Len(); n != 0 || b != 0 {
		t.Fatalf("expired entry kept: %d %d", n, b)
	}
}

func TestTurnEncoding(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		turn *HiddenTurn
	}{
		{name: "with prior", turn: testTurn("c1", "c2")},
		{name: "no prior", turn: func() *HiddenTurn { x := testTurn("c1"); x.Prior = nil; return x }()},
		// A round of client calls alone after server rounds: no results.
		{name: "no results", turn: func() *HiddenTurn { x := testTurn("c1"); x.ToolResults = nil; return x }()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := encodeTurn(tc.turn)
			got, err := decodeTurn(b)
			if err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			if string(got.Prior) != string(tc.turn.Prior) || string(got.Assistant) != string(tc.turn.Assistant) ||
				len(got.ToolResults) != len(tc.turn.ToolResults) || (len(got.ToolResults) > 0 && string(got.ToolResults[0]) != string(tc.turn.ToolResults[0])) ||
				!sameIDs(got.ClientIDs, tc.turn.ClientIDs) || !got.Saved.Equal(tc.turn.Saved) {
				t.Fatalf("round trip: %+v", got)
			}
		})
	}
}

func FuzzDecodeTurn(f *testing.F) {
	f.Add(encodeTurn(testTurn("a", "b")))
	f.Add([]byte(`{"p":[],"a":{},"r":[],"c":["x"],"s":1}`))
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		turn, err := decodeTurn(b)
		if err != nil {
			return
		}
		if len(turn.ClientIDs) == 0 || !gjson.ValidBytes(turn.Assistant) {
			t.Fatalf("accepted a turn without client ids or with an invalid assistant: %s", b)
		}
	})
}

type failingState struct{}

func (failingState) Save(context.Context, string, *HiddenTurn) error { return errors.New("down") }
func (failingState) Load(context.Context, []string) ([]*HiddenTurn, error) {
	return nil, errors.New("down")
}

func TestResume(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	alice, bob := &pipeline.Tenant{Name: "alice"}, &pipeline.Tenant{Name: "bob"}
	mem := NewMemoryState(time.Hour, 100, stateMaxBytes)
	_ = mem.Save(ctx, StateKey(alice, "c1"), testTurn("c1", "c2"))
	const follow = `{"model":"m","messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"lookup","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"r1"},{"role":"tool","tool_call_id":"c2","content":"r2"}]}`
	cases := []struct {
		name   string
		state  StateStore
		tenant *pipeline.Tenant
		body   string
		want   []string // tool_call ids of the upstream's assistant messages, then tool message ids
	}{
		{name: "spliced", state: mem, tenant: alice, body: follow, want: []string{"p1", "tool:p1", "s1,c1,c2", "tool:s1", "tool:c1", "tool:c2"}},
		{name: "other tenant", state: mem, tenant: &pipeline.Tenant{Name: "mallory"}, body: follow, want: []string{"c1,c2", "tool:c1", "tool:c2"}},
		{name: "ids differ", state: mem, tenant: alice, body: follow[:len(follow)-len(`,{"role":"tool","tool_call_id":"c2","content":"r2"}]}`)] + `]}`,
			want: []string{"c1,c2", "tool:c1"}},
		{name: "store down", state: failingState{}, tenant: alice, body: follow, want: []string{"c1,c2", "tool:c1", "tool:c2"}},
	}
	// "ids differ": a turn is kept under c1's key, but for the client ids
	// {c1} only; the client's message lists {c1,c2}: not spliced.
	other := NewMemoryState(time.Hour, 100, stateMaxBytes)
	_ = other.Save(ctx, StateKey(alice, "c1"), testTurn("c1"))
	cases[2].state = other
	// The model called c1, the server's s1, then c2: the results go up in
	// that order, whatever order the client sent its own in; one that
	// answers no call of the turn stays after them.
	middle := NewMemoryState(time.Hour, 100, stateMaxBytes)
	_ = middle.Save(ctx, StateKey(bob, "c1"), &HiddenTurn{
		Assistant: []byte(`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{}"}},` +
			`{"id":"s1","type":"function","function":{"name":"calculator","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"lookup","arguments":"{}"}}]}`),
		ToolResults: [][]byte{[]byte(`{"role":"tool","tool_call_id":"s1","content":"42"}`)},
		ClientIDs:   []string{"c1", "c2"},
	})
	cases = append(cases, struct {
		name   string
		state  StateStore
		tenant *pipeline.Tenant
		body   string
		want   []string
	}{name: "in call order", state: middle, tenant: bob, body: `{"model":"m","messages":[{"role":"user","content":"hi"},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"lookup","arguments":"{}"}},{"id":"c2","type":"function","function":{"name":"lookup","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"zz","content":"?"},{"role":"tool","tool_call_id":"c2","content":"r2"},{"role":"tool","tool_call_id":"c1","content":"r1"},{"role":"user","content":"next"}]}`,
		want: []string{"c1,s1,c2", "tool:c1", "tool:s1", "tool:c2", "tool:zz"}})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, err := New(Options{State: tc.state})
			if err != nil {
				t.Fatal(err)
			}
			req := &pipeline.Request{Body: []byte(tc.body), Tenant: tc.tenant}
			out := l.resume(ctx, req)
			if string(req.Body) != tc.body {
				t.Fatal("resume modified the caller's request")
			}
			var got []string
			gjson.GetBytes(out.Body, "messages").ForEach(func(_, m gjson.Result) bool {
				switch m.Get("role").Str {
				case "assistant":
					var ids []string
					m.Get("tool_calls.#.id").ForEach(func(_, v gjson.Result) bool { ids = append(ids, v.Str); return true })
					got = append(got, strings.Join(ids, ","))
				case "tool":
					got = append(got, "tool:"+m.Get("tool_call_id").Str)
				}
				return true
			})
			if joinIDs(got) != joinIDs(tc.want) || !gjson.ValidBytes(out.Body) {
				t.Fatalf("got %v, want %v\n%s", got, tc.want, out.Body)
			}
		})
	}
}

func joinIDs(s []string) string { return strings.Join(s, "|") }

// TestStateClaim: a key is claimed once, by the first Claim, until the
// store's TTL; memory and Redis alike (the Redis half skips without
// redis-server).
func TestStateClaim(t *testing.T) {
	t.Parallel()
	m := NewMemoryState(time.Minute, 10, stateMaxBytes)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	claimOnce(t, m)
	claimedAt(t, m, now)
	now = now.Add(61 * time.Second)
	if won, err := m.Claim(context.Background(), "k"); err != nil || !won {
		t.Fatalf("a claim past the TTL: %v %v", won, err)
	}
	t.Run("redis", func(t *testing.T) {
		srv := testredis.Start(t)
		rs := NewRedisState(srv.Client(t), "test:claim:", time.Minute)
		claimOnce(t, rs)
		claimedAt(t, rs, time.Now())
	})
}

func claimOnce(t *testing.T, s StateClaimer) {
	t.Helper()
	ctx := context.Background()
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if won, err := s.Claim(ctx, "k"); err != nil {
				t.Error(err)
			} else if won {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Fatalf("%d of 8 concurrent claims won", n)
	}
	if won, _ := s.Claim(ctx, "other"); !won {
		t.Fatal("another key was claimed already")
	}
}

// claimedAt checks that s tells when key "other" was claimed (want, to the
// millisecond), and that an unclaimed key has no claim: a left claim ages
// out by it (approval.go).
func claimedAt(t *testing.T, s StateClaimer, want time.Time) {
	t.Helper()
	ag := s.(ClaimAger)
	if at, ok, err := ag.ClaimedAt(context.Background(), "other"); err != nil || !ok || at.Sub(want).Abs() > 2*time.Second {
		t.Fatalf("claimed at %v (%v %v), want %v", at, ok, err, want)
	}
	if _, ok, err := ag.ClaimedAt(context.Background(), "unclaimed"); err != nil || ok {
		t.Fatalf("an unclaimed key: %v %v", ok, err)
	}
}

// Resize (a reload with other tool_loop state settings) keeps the turns
// that fit in the new bounds, dropping the oldest first, and applies a new
// TTL to the turns saved from then on; a turn kept expires when it was to.
func TestMemoryStateResize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := NewMemoryState(time.Hour, 10, stateMaxBytes)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	for i := range 6 {
		_ = m.Save(ctx, "k"+strconv.Itoa(i), testTurn("c"+strconv.Itoa(i)))
	}
	m.Resize(time.Hour, 20, stateMaxBytes)
	if n, _ := m.Len(); n != 6 {
		t.Fatalf("larger bounds: %d entries kept, want 6", n)
	}
	m.Resize(time.Minute, 4, stateMaxBytes)
	got, _ := m.Load(ctx, []string{"k0", "k1", "k2", "k5"})
	if n, _ := m.Len(); n != 4 || got[0] != nil || got[1] != nil || got[2] == nil || got[3] == nil {
		t.Fatalf("smaller bound: %d entries, k0 %v k1 %v k2 %v k5 %v", n, got[0] != nil, got[1] != nil, got[2] != nil, got[3] != nil)
	}
	_, b := m.Len()
	m.Resize(time.Minute, 4, b-1)
	if n, b2 := m.Len(); n != 3 || b2 > b-1 {
		t.Fatalf("smaller byte bound: %d entries, %d bytes", n, b2)
	}
	_ = m.Save(ctx, "new", testTurn("n")) // under the new TTL
	now = now.Add(2 * time.Minute)
	got, _ = m.Load(ctx, []string{"new", "k5"})
	if got[0] != nil || got[1] == nil {
		t.Fatalf("after 2 minutes: the new turn (1m TTL) kept %v, an old one (1h TTL) kept %v", got[0] != nil, got[1] != nil)
	}
	if n, b := m.Len(); n > 4 || b > stateMaxBytes {
		t.Fatalf("over the bounds: %d entries, %d bytes", n, b)
	}
}

// carried: the client's history of a turn holds the turn's earlier server
// calls (a Responses client replaying mcp_call items), matched by name and
// count, whatever arguments it was shown; the turn starts after the
// client's last own input, a user message or a result of its own call.
func TestCarried(t *testing.T) {
	prior := []byte(`{"role":"assistant","content":"a","tool_calls":[{"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"6*7\"}"}}]},` +
		`{"role":"tool","tool_call_id":"call_1","content":"42"}`)
	msgs := func(raw string) []gjson.Result { return gjson.Parse(raw).Array() }
	for name, c := range map[string]struct {
		before string
		want   bool
	}{
		"chat: no server call":     {`[{"role":"user","content":"go"}]`, false},
		"replayed, args redacted":  {`[{"role":"user","content":"go"},{"role":"assistant","content":"a","tool_calls":[{"id":"mcp_r_1","type":"function","function":{"name":"calculator","arguments":"{}"}}]},{"role":"tool","tool_call_id":"mcp_r_1","content":"42"}]`, true},
		"an earlier turn's call":   {`[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"mcp_r_1","type":"function","function":{"name":"calculator","arguments":"{}"}}]},{"role":"tool","tool_call_id":"mcp_r_1","content":"42"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_w","type":"function","function":{"name":"get_weather","arguments":"{}"}}]},{"role":"tool","tool_call_id":"call_w","content":"sunny"}]`, false},
		"once, where it ran twice": {`[{"role":"user","content":"go"},{"role":"assistant","content":null,"tool_calls":[{"id":"mcp_r_1","type":"function","function":{"name":"calculator","arguments":"{}"}}]},{"role":"tool","tool_call_id":"mcp_r_1","content":"42"}]`, false},
	} {
		p := prior
		if name == "once, where it ran twice" {
			p = append(append(append([]byte(nil), prior...), ','), prior...) // the turn called it in two rounds
		}
		if got := carried(msgs(c.before), p); got != c.want {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
}
