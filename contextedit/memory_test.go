package contextedit

import (
	"runtime"
	"strings"
	"testing"
)

// TestTranscriptMemory: a transcript costs a few times the body it parses,
// whatever the body holds. A body of many short messages (the most
// messages an 8 MiB body can hold) once cost 20 times its size: every
// message held two 80-byte gjson.Results, and the slice of them grew by
// doubling. Not parallel: it reads the process's allocation counter.
func TestTranscriptMemory(t *testing.T) {
	const n = 50000
	var b strings.Builder
	b.WriteString(`{"model":"m","messages":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"role":"user","content":"x"}`)
	}
	b.WriteString(`]}`)
	body := []byte(b.String())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	tr, err := parse(body, nil)
	runtime.ReadMemStats(&after)
	if err != nil || len(tr.msgs) != n {
		t.Fatalf("parse: %v, %d messages", err, len(tr.msgs))
	}
	ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(body))
	t.Logf("%d-byte body: %.1f bytes allocated per body byte", len(body), ratio)
	if ratio > 8 {
		t.Fatalf("parsing a %d-byte body allocated %.1f× its size", len(body), ratio)
	}
}
