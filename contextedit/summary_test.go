package contextedit

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/pipeline"
)

// ttlStore is a Store that records each value's ttl and forgets the
// values whose ttl "passed" (expire).
type ttlStore struct {
	mu  sync.Mutex
	val map[string][]byte
	ttl map[string]time.Duration
}

func (s *ttlStore) Get(_ context.Context, key string) ([]byte, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.val[key]
	return v, ok, nil
}

func (s *ttlStore) Set(_ context.Context, key string, val []byte, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.val[key], s.ttl[key] = append([]byte(nil), val...), ttl
	return nil
}

// expire forgets the values kept for at most d.
func (s *ttlStore) expire(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ttl := range s.ttl {
		if ttl <= d {
			delete(s.val, k)
		}
	}
}

// summaryFixture is a summarizer over a ttlStore whose model answers what
// answer returns, and a conversation of three messages to summarise (the
// two before the latest).
func summaryFixture(t *testing.T, answer func() string) (*summarizer, *ttlStore, *pipeline.Request, *transcript) {
	t.Helper()
	return summaryFixtureCalls(t, func(*pipeline.Request) string { return answer() })
}

// summaryFixtureCalls is summaryFixture whose model sees each call.
func summaryFixtureCalls(t *testing.T, answer func(*pipeline.Request) string) (*summarizer, *ttlStore, *pipeline.Request, *transcript) {
	t.Helper()
	route := &pipeline.Route{Name: "sum", ModelLayer: pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Body: []byte(`{"choices":[{"message":{"role":"assistant","content":` + strconv.Quote(answer(r)) + `}}]}`)}, nil
	})}
	st := &ttlStore{val: map[string][]byte{}, ttl: map[string]time.Duration{}}
	s := &summarizer{model: "sum", prompt: "Summarise.", lookup: func(string) *pipeline.Route { return route }, store: st}
	req := &pipeline.Request{ID: "r", Meta: &pipeline.Meta{},
		Body: []byte(`{"model":"m","messages":[{"role":"user","content":"a long turn"},{"role":"assistant","content":"a reply"},{"role":"user","content":"now"}]}`)}
	tr, err := parse(req.Body, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, st, req, tr
}

// A summary too long for the request is kept only briefly, marked: while
// it is, a request it does not fit goes to summary_fallback without asking
// the model again, one it fits takes it; once it expired the model is
// asked anew, and a summary that fits is kept for a day.
func TestUnfitSummaryIsKeptBriefly(t *testing.T) {
	t.Parallel()
	answer := strings.Repeat("word ", 50)
	calls := 0
	s, st, req, tr := summaryFixture(t, func() string { calls++; return answer })
	short := func(text string) bool { return len(text) < 100 }
	long := func(text string) bool { return true }
	if _, err := s.summary(context.Background(), req, tr, 2, 1000, short); err != errNoSummary || calls != 1 {
		t.Fatalf("a summary too long: %v after %d calls", err, calls)
	}
	if _, err := s.summary(context.Background(), req, tr, 2, 1000, short); err != errNoSummary || calls != 1 {
		t.Fatalf("asked again at once: %v after %d calls, want errNoSummary without a call", err, calls)
	}
	if text, err := s.summary(context.Background(), req, tr, 2, 1000, long); err != nil || text != strings.TrimSpace(answer) || calls != 1 {
		t.Fatalf("a request the kept summary fits: %q %v after %d calls", text, err, calls)
	}
	st.expire(unfitTTL)
	answer = "short"
	if text, err := s.summary(context.Background(), req, tr, 2, 1000, short); err != nil || text != "short" || calls != 2 {
		t.Fatalf("after the unfit one expired: %q %v after %d calls", text, err, calls)
	}
	st.expire(unfitTTL) // the fitting one is kept for a day
	if text, err := s.summary(context.Background(), req, tr, 2, 1000, short); err != nil || text != "short" || calls != 2 {
		t.Fatalf("the fitting summary was not kept: %q %v after %d calls", text, err, calls)
	}
	// A request the kept summary does not fit (a smaller window) asks the
	// model, and its unfit answer does not replace the kept one.
	tiny := func(text string) bool { return len(text) < 3 }
	answer = "still too long"
	if _, err := s.summary(context.Background(), req, tr, 2, 1000, tiny); err != errNoSummary || calls != 3 {
		t.Fatalf("a smaller window: %v after %d calls", err, calls)
	}
	if text, err := s.summary(context.Background(), req, tr, 2, 1000, short); err != nil || text != "short" || calls != 3 {
		t.Fatalf("the kept summary was replaced: %q %v after %d calls", text, err, calls)
	}
}

// A summary marked unfit that fits a later request (a larger window) is
// kept as a summary from then on, for a day.
func TestUnfitSummaryThatFitsIsKept(t *testing.T) {
	t.Parallel()
	calls := 0
	s, st, req, tr := summaryFixture(t, func() string { calls++; return "a summary of some length" })
	if _, err := s.summary(context.Background(), req, tr, 2, 1000, func(string) bool { return false }); err != errNoSummary {
		t.Fatal(err)
	}
	if text, err := s.summary(context.Background(), req, tr, 2, 1000, func(string) bool { return true }); err != nil || text != "a summary of some length" {
		t.Fatalf("%q %v", text, err)
	}
	st.expire(unfitTTL)
	if text, err := s.summary(context.Background(), req, tr, 2, 1000, func(string) bool { return true }); err != nil || text != "a summary of some length" || calls != 1 {
		t.Fatalf("the summary that fits was not kept for a day: %q %v after %d calls", text, err, calls)
	}
}

// With room for no summary (under minSummaryTokens) the summary model is
// not asked; with room it is, without a token cap of the gateway's.
func TestSummaryNeedsRoom(t *testing.T) {
	t.Parallel()
	var asked []string
	s, _, req, tr := summaryFixtureCalls(t, func(r *pipeline.Request) string {
		asked = append(asked, string(r.Body))
		return "short"
	})
	fits := func(string) bool { return true }
	if _, err := s.summary(context.Background(), req, tr, 2, minSummaryTokens-1, fits); err != errNoSummary || len(asked) != 0 {
		t.Fatalf("room for no summary: %v after %d calls", err, len(asked))
	}
	if text, err := s.summary(context.Background(), req, tr, 2, minSummaryTokens, fits); err != nil || text != "short" || len(asked) != 1 {
		t.Fatalf("room for a summary: %q %v after %d calls", text, err, len(asked))
	}
	if m := gjson.Get(asked[0], "max_completion_tokens"); m.Exists() || gjson.Get(asked[0], "max_tokens").Exists() {
		t.Fatalf("the summary call carries a token cap: %s", asked[0])
	}
}
