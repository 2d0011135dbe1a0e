// Package testmetrics reads the gateway's metrics registry for tests.
package testmetrics

import (
	"testing"

	"github.com/llmgw/gateway/observe"
)

// HasSeries reports whether the metric name has a series in
// observe.Registry whose labels include every pair of labels (a test's own
// label values, so that tests sharing the registry do not see each
// other's series).
func HasSeries(t testing.TB, name string, labels map[string]string) bool {
	t.Helper()
	mfs, err := observe.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			have := 0
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
					have++
				}
			}
			if have == len(labels) {
				return true
			}
		}
	}
	return false
}
