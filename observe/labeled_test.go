package observe

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func TestLabeled(t *testing.T) {
	t.Parallel()
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "labeled_test_total", Help: "x"}, []string{"a", "b"})
	type key struct{ a, b string }
	resolved := 0
	var mu sync.Mutex
	l := NewLabeled(func(k key) prometheus.Counter {
		mu.Lock()
		resolved++
		mu.Unlock()
		return vec.WithLabelValues(k.a, k.b)
	})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				l.Get(key{"x", "y"}).Inc()
				l.Get(key{"x", "z"}).Inc()
			}
		})
	}
	wg.Wait()
	for _, b := range []string{"y", "z"} {
		var m dto.Metric
		if err := vec.WithLabelValues("x", b).Write(&m); err != nil {
			t.Fatal(err)
		}
		if got := m.GetCounter().GetValue(); got != 800 {
			t.Errorf("x,%s = %v, want 800", b, got)
		}
	}
	if resolved < 2 || resolved > 16 {
		t.Fatalf("resolved %d times for 2 label sets", resolved)
	}
}

func BenchmarkLabeled(b *testing.B) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "labeled_bench_total", Help: "x"}, []string{"route", "model", "status"})
	type key struct {
		route, model string
		status       int
	}
	l := NewLabeled(func(k key) prometheus.Counter { return vec.WithLabelValues(k.route, k.model, "200") })
	b.Run("WithLabelValues", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			vec.WithLabelValues("/v1/chat/completions", "gpt-x", "200").Inc()
		}
	})
	b.Run("Labeled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l.Get(key{"/v1/chat/completions", "gpt-x", 200}).Inc()
		}
	})
}
