package guardrails

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"
)

// verdictBodies are classifier answers: the documented {"flagged": bool},
// and what a broken or hostile classifier may send instead.
var verdictBodies = []string{
	`{"flagged":true}`, `{"flagged":false}`, `{"flagged":"true"}`, `{"flagged":1}`, `{"flagged":null}`,
	`{"result":{"flagged":true}}`, `[{"flagged":true}]`, `{"flagged":false,"flagged":true}`,
	`{"fl\u0061gged":true}`, ` {"flagged" : true } `, `{"flagged":true`, `{"flagged":true}{"flagged":false}`,
	`{"flagged.x":true,"flagged":false}`, `{"flagged\u0000":true}`, `true`, ``, "{\"flagged\":true,\"why\":\"\xff\"}",
}

// flaggedValues returns the raw values of the top-level "flagged" keys of
// body, read with encoding/json (not the gjson the classifier uses), or
// nil when body is not a JSON object.
func flaggedValues(body []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var vals []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if k, _ := tok.(string); k == "flagged" {
			vals = append(vals, string(v))
		}
	}
	return vals
}

// FuzzClassifierVerdict: any answer of an http guardrail's classifier
// (status and body) yields a verdict without panicking, and the verdict
// goes against the guard's fail mode only when a 2xx body's documented
// field, top-level "flagged", says so: a fail-open guard blocks only on
// "flagged": true, a fail-closed one passes only on "flagged": false.
func FuzzClassifierVerdict(f *testing.F) {
	for _, b := range verdictBodies {
		f.Add([]byte(b), uint16(200))
	}
	f.Add([]byte(`{"flagged":false}`), uint16(500))
	f.Add([]byte(`{"flagged":true}`), uint16(204))
	f.Add([]byte(`{"flagged":false}`), uint16(302))
	f.Add([]byte(`{"flagged":true}`), uint16(1200))
	f.Fuzz(func(t *testing.T, body []byte, status uint16) {
		st := int(status)
		vals := flaggedValues(body)
		says := func(want string) bool {
			for _, v := range vals {
				if v == want {
					return true
				}
			}
			return false
		}
		for _, failOpen := range []bool{true, false} {
			c := &classifier{failOpen: failOpen}
			got := c.verdict(st, body)
			if got != failOpen { // the fail mode's verdict
				continue
			}
			want := "false"
			if got {
				want = "true"
			}
			if st/100 != 2 || !says(want) {
				t.Fatalf("fail open %v: status %d body %q: flagged %v, but its top-level flagged values are %q", failOpen, st, body, got, vals)
			}
		}
	})
}

// verdictTransport answers every request with status and body, in memory.
type verdictTransport struct {
	status int
	body   []byte
}

func (v *verdictTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{StatusCode: v.status, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(v.body)),
		Request: r, ProtoMajor: 1, ProtoMinor: 1}, nil
}

// TestClassifierReadsVerdict: flagged asks over HTTP and decides as verdict
// does on what it read, an answer past maxVerdict being cut there.
func TestClassifierReadsVerdict(t *testing.T) {
	t.Parallel()
	long := append([]byte(`{"flagged":true,"pad":"`), bytes.Repeat([]byte{'x'}, maxVerdict)...)
	long = append(long, `"}`...)
	bodies := append([][]byte{long}, nil)
	for _, b := range verdictBodies {
		bodies = append(bodies, []byte(b))
	}
	for _, body := range bodies {
		for _, st := range []int{200, 204, 302, 500} {
			for _, failOpen := range []bool{true, false} {
				c := &classifier{url: "http://classifier.invalid/check", name: "g", stage: StageRequest, timeout: 5 * time.Second,
					failOpen: failOpen, client: &http.Client{Transport: &verdictTransport{status: st, body: body}}}
				if got, want := c.flagged(context.Background(), []byte("text")), c.verdict(st, body[:min(len(body), maxVerdict)]); got != want {
					t.Errorf("status %d body %.40q fail open %v: flagged %v, verdict %v", st, body, failOpen, got, want)
				}
			}
		}
	}
	if (&classifier{failOpen: true}).verdict(200, long[:maxVerdict]) {
		t.Error("a fail-open guard blocked on an answer cut at maxVerdict")
	}
}
