package wiretest

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/llmgw/gateway/sse"
)

// FuzzCheckStream checks that CheckStream never panics, always returns a
// Summary and a *Violation on failure, and that every stream it accepts reads
// back through the lenient sse.Reader as exactly its chunks (then [DONE] or
// the error event).
func FuzzCheckStream(f *testing.F) {
	for _, name := range []string{"text_usage.sse", "tool_calls_usage.sse"} {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(1))
	}
	f.Add(frame(role, text, stop, doneEv), uint8(0))
	f.Add(frame(role, tc0, frag("0", "{}"), tc1, tcFin, doneEv), uint8(0))
	f.Add(frame(role, "RAW:: keep-alive\n\nevent: error\ndata: "+errorEnv+"\n\n"), uint8(2))
	f.Fuzz(func(t *testing.T, raw []byte, flags uint8) {
		opt := Options{WantUsage: flags&1 != 0, WantError: flags&2 != 0}
		sum, err := CheckStream(raw, opt)
		if sum == nil {
			t.Fatal("nil Summary")
		}
		if err != nil {
			var v *Violation
			if !errors.As(err, &v) || v.Rule == "" {
				t.Fatalf("error %v is not a Violation with a rule", err)
			}
			return
		}
		rd := sse.NewReader(bytes.NewReader(raw), len(raw)+1)
		for i, want := range sum.Chunks {
			e, err := rd.Next()
			if err != nil || !bytes.Equal(e.Data, want) || e.Name != nil {
				t.Fatalf("chunk %d: reader gave %q %q, %v; checker %q", i+1, e.Name, e.Data, err, want)
			}
		}
		e, err := rd.Next()
		switch {
		case err != nil:
			t.Fatalf("last event: %v", err)
		case opt.WantError && (string(e.Name) != "error" || !bytes.Equal(e.Data, sum.Error)):
			t.Fatalf("error event %q %q, want %q", e.Name, e.Data, sum.Error)
		case !opt.WantError && !sse.IsDone(e.Data):
			t.Fatalf("last event %q, want [DONE]", e.Data)
		}
		if _, err := rd.Next(); err != io.EOF {
			t.Fatalf("after last event: %v", err)
		}
	})
}
