package pipeline

import (
	"fmt"
	"testing"
)

// TestMetaSetAll: SetAll replaces the headers it names and appends the
// others in order, past the inline few, as Set one by one does.
func TestMetaSetAll(t *testing.T) {
	t.Parallel()
	var one, all Meta
	for _, m := range []*Meta{&one, &all} {
		m.Set("a", "1")
		m.Set("b", "2")
	}
	hs := []Header{{"b", "3"}, {"c", "4"}, {"d", "5"}, {"e", "6"}, {"f", "7"}, {"a", "8"}}
	for _, h := range hs {
		one.Set(h.Key, h.Value)
	}
	all.SetAll(hs...)
	got, want := fmt.Sprint(all.Headers()), "[{a 8} {b 3} {c 4} {d 5} {e 6} {f 7}]"
	if got != want || fmt.Sprint(one.Headers()) != want {
		t.Fatalf("SetAll %s, Set %s, want %s", got, one.Headers(), want)
	}
	var nilMeta *Meta
	nilMeta.SetAll(hs...) // a request without Meta: no-op
}

// TestMetaSetGroup: a group's headers are written after the others, found
// by Get, replaced in place by Set, and a header set before under the same
// name is not written twice; a second group is copied in.
func TestMetaSetGroup(t *testing.T) {
	t.Parallel()
	var m Meta
	m.Set("a", "1")
	m.Set("x", "old")
	group := []Header{{"x", "2"}, {"y", "3"}}
	m.SetGroup(group)
	m.Set("y", "4")
	m.Set("b", "5")
	var each []Header
	m.Each(func(k, v string) { each = append(each, Header{k, v}) })
	if got, want := fmt.Sprint(each), "[{a 1} {b 5} {x 2} {y 4}]"; got != want {
		t.Fatalf("Each %s, want %s", got, want)
	}
	if m.Get("x") != "2" || m.Get("y") != "4" || fmt.Sprint(m.Headers()) != fmt.Sprint(each) {
		t.Fatalf("Get x=%q y=%q, Headers %v", m.Get("x"), m.Get("y"), m.Headers())
	}
	second := []Header{{"y", "6"}, {"z", "7"}}
	m.SetGroup(second)
	second[1].Value = "changed" // copied, not retained
	if m.Get("y") != "6" || m.Get("z") != "7" {
		t.Fatalf("second group: y=%q z=%q", m.Get("y"), m.Get("z"))
	}
	var nilMeta *Meta
	nilMeta.SetGroup(group)
}

// TakeLimits keeps, of each x-ratelimit-* trio, the tighter of the
// client's and the later call's, and the lower budget.
func TestTakeLimits(t *testing.T) {
	t.Parallel()
	req, tok := RateLimitHeaders[0], RateLimitHeaders[1]
	trio := func(names [3]string, limit, left, reset string) []Header {
		return []Header{{names[0], limit}, {names[1], left}, {names[2], reset}}
	}
	client := func() *Meta {
		m := &Meta{}
		m.SetGroup(append(trio(req, "10", "5", "6s"), trio(tok, "1000", "900", "1s")...))
		m.Set(BudgetHeader, "2.5")
		return m
	}
	for _, tc := range []struct {
		name string
		from []Header
		want map[string]string
	}{
		{"tighter requests", trio(req, "10", "4", "7s"), map[string]string{req[1]: "4", req[2]: "7s", tok[1]: "900"}},
		{"looser requests of another rule", trio(req, "100", "90", "1s"), map[string]string{req[0]: "10", req[1]: "5", req[2]: "6s"}},
		{"tighter by ratio", trio(req, "2", "0", "30s"), map[string]string{req[0]: "2", req[1]: "0", req[2]: "30s"}},
		{"tokens", trio(tok, "1000", "100", "2s"), map[string]string{tok[1]: "100", req[1]: "5"}},
		{"lower budget", []Header{{BudgetHeader, "1.25"}}, map[string]string{BudgetHeader: "1.25", req[1]: "5"}},
		{"higher budget", []Header{{BudgetHeader, "3"}}, map[string]string{BudgetHeader: "2.5"}},
		{"nothing", nil, map[string]string{req[1]: "5", tok[1]: "900", BudgetHeader: "2.5"}},
	} {
		m, from := client(), &Meta{}
		from.SetAll(tc.from...)
		m.TakeLimits(from)
		for k, v := range tc.want {
			if got := m.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", tc.name, k, got, v)
			}
		}
	}
	// A client with no headers of its own takes the call's.
	m, from := &Meta{}, &Meta{}
	from.SetAll(trio(req, "3", "1", "20s")...)
	m.TakeLimits(from)
	if m.Get(req[1]) != "1" || m.Get(req[0]) != "3" {
		t.Errorf("empty client: %v", m.Headers())
	}
	var nilMeta *Meta
	nilMeta.TakeLimits(from) // no panic
}
