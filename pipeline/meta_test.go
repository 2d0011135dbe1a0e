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
