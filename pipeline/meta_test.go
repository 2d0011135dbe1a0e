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
