package limits

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/contextedit"
	"github.com/llmgw/gateway/pipeline"
)

// chunkStream yields chunks, then end (io.EOF when nil); Close may come
// from any goroutine.
type chunkStream struct {
	mu     sync.Mutex
	chunks []string
	end    error
}

func (s *chunkStream) Next() ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.chunks) == 0 {
		if s.end != nil {
			return nil, s.end
		}
		return nil, io.EOF
	}
	c := s.chunks[0]
	s.chunks = s.chunks[1:]
	return []byte(c), nil
}

func (s *chunkStream) Close() {}

// TestMeteredStreamEndsOnce: a stream read to its end while another
// goroutine closes it (a fallback's cancel, a client that left) is charged
// and noted in the request's usage log once, with its usage if the meter
// read it. Run with -race: end used to read and set its state unguarded
// from both goroutines.
func TestMeteredStreamEndsOnce(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, "", NewMemoryStore, "")
	for range 200 {
		up := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			return &pipeline.Response{Stream: &chunkStream{chunks: []string{
				`{"choices":[{"index":0,"delta":{"content":"x"}}]}`,
				`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5}}`,
			}}}, nil
		})
		log := new(pipeline.UsageLog)
		r := &pipeline.Request{Model: "gpt-x", Stream: true, IncludeUsage: true, Meta: &pipeline.Meta{}, Usage: log,
			Body: []byte(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`)}
		resp, err := l.Meter(up).Chat(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				if _, err := resp.Stream.Next(); err != nil {
					return
				}
			}
		})
		wg.Go(resp.Stream.Close)
		wg.Wait()
		resp.Stream.Close()
		if c, ok := log.Total(); ok && (c.Prompt != 10 || c.Completion != 5) {
			t.Fatalf("noted %+v: the call's usage is 10 and 5, noted once", c)
		}
	}
}

// A stream that ends without usage (a client that read the answer and left
// before its usage chunk) is charged its input estimate and about a token
// per chunk it passed after the role's, not nothing for its output.
func TestStreamWithoutUsageChargesItsChunks(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
	l := newLimiterAt(t, "", NewMemoryStore, "w", func() time.Time { return at })
	chunks := []string{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`}
	for range 8 {
		chunks = append(chunks, `{"choices":[{"index":0,"delta":{"content":"tok"}}]}`)
	}
	up := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Stream: &chunkStream{chunks: chunks}}, nil
	})
	r := &pipeline.Request{Model: "gpt-x", Stream: true, Meta: &pipeline.Meta{}, Tenant: &pipeline.Tenant{Name: "w"},
		Body: []byte(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`)}
	resp, err := l.Meter(up).Chat(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	for range 6 { // the role and five tokens, then the client leaves
		if _, err := resp.Stream.Next(); err != nil {
			t.Fatal(err)
		}
	}
	resp.Stream.Close()
	l.Flush()
	body, err := l.Report(context.Background(), UsageQuery{From: at, To: at, GroupBy: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	if w := gjson.GetBytes(body, `data.#(group=="w")`); w.Get("output_tokens").Int() != 5 || w.Get("input_tokens").Int() == 0 {
		t.Fatalf("usage of a stream cut after five tokens: %s", body)
	}
}

// TestMeteredStreamKeepsNoCopy: the meter asks the upstream for a stream's
// usage with a copy of the request, and the stream it returns holds the
// request the meter was given, not that copy and its body: an open stream
// holds what it needs, and thousands of them are open at once.
func TestMeteredStreamKeepsNoCopy(t *testing.T) {
	t.Parallel()
	l := newLimiter(t, "", NewMemoryStore, "")
	var sent *pipeline.Request
	up := pipeline.HandlerFunc(func(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
		sent = r
		return &pipeline.Response{Stream: &chunkStream{chunks: []string{`{"choices":[{"index":0,"delta":{"content":"x"}}]}`}}}, nil
	})
	r := &pipeline.Request{Model: "gpt-x", Stream: true, Meta: &pipeline.Meta{}, Usage: new(pipeline.UsageLog),
		Body: []byte(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`)}
	resp, err := l.Meter(up).Chat(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Stream.Close()
	if sent == r || !gjson.GetBytes(sent.Body, "stream_options.include_usage").Bool() {
		t.Fatalf("the upstream was sent %s: usage not asked for on a copy", sent.Body)
	}
	m, ok := resp.Stream.(*meteredStream)
	if !ok {
		t.Fatalf("the stream is a %T, not metered", resp.Stream)
	}
	if m.r != r {
		t.Fatal("the metered stream holds the copy sent upstream, not the request it was given")
	}
}

// A stream that fails before any content (a fallback's failed attempt, a
// client that left before the first token) is charged nothing, as the
// same failure of a JSON answer is: a request answered by its fallback
// used to pay for the failed attempt's estimated input too.
func TestStreamFailedBeforeContentChargesNothing(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
	l := newLimiterAt(t, "", NewMemoryStore, "w", func() time.Time { return at })
	for _, stream := range []bool{true, false} {
		up := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			if !stream {
				return nil, &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Provider: "p", Err: io.ErrUnexpectedEOF}
			}
			// An empty preamble chunk (Azure's prompt_filter_results) and
			// the role chunk: no content yet.
			return &pipeline.Response{Stream: &chunkStream{chunks: []string{`{"choices":[],"prompt_filter_results":[]}`,
				`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`}, end: cut}}, nil
		})
		r := &pipeline.Request{Model: "gpt-x", Stream: stream, Meta: &pipeline.Meta{}, Tenant: &pipeline.Tenant{Name: "w"},
			Body: []byte(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("long prompt ", 100) + `"}]}`)}
		resp, err := l.Meter(up).Chat(context.Background(), r)
		if stream {
			if err != nil {
				t.Fatal(err)
			}
			drain(resp.Stream)
		}
	}
	if w := usageOf(t, l, at); w.Get("input_tokens").Int() != 0 || w.Get("output_tokens").Int() != 0 {
		t.Fatalf("usage of failed calls: %s", w.Raw)
	}
}

// cut is how the streams of these tests fail.
var cut = &pipeline.UpstreamError{Kind: pipeline.UpstreamCut, Provider: "p", Err: io.ErrUnexpectedEOF}

// drain reads s to its end and closes it.
func drain(s pipeline.Stream) {
	for {
		if _, err := s.Next(); err != nil {
			break
		}
	}
	s.Close()
}

// usageOf flushes l's usage record and returns tenant w's row of day at.
func usageOf(t *testing.T, l *Limiter, at time.Time) gjson.Result {
	t.Helper()
	l.Flush()
	body, err := l.Report(context.Background(), UsageQuery{From: at, To: at, GroupBy: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	return gjson.GetBytes(body, `data.#(group=="w")`)
}

// A stream cut after content it passed on is charged, even when its first
// chunk carried the role and the content together (as TGI sends it).
func TestStreamCutAfterContentIsCharged(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
	l := newLimiterAt(t, "", NewMemoryStore, "w", func() time.Time { return at })
	up := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Stream: &chunkStream{chunks: []string{`{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hello"}}]}`}, end: cut}}, nil
	})
	r := &pipeline.Request{Model: "gpt-x", Stream: true, Meta: &pipeline.Meta{}, Tenant: &pipeline.Tenant{Name: "w"},
		Body: []byte(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`)}
	resp, err := l.Meter(up).Chat(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	drain(resp.Stream)
	if w := usageOf(t, l, at); w.Get("input_tokens").Int() == 0 {
		t.Fatalf("a stream cut after its content was not charged: %s", w.Raw)
	}
}

// TestChargeAtEndDoesNotBuildTheTokenizer: the charge of an answer that
// reported no usage is made before the answer's last bytes go out, so it
// does not wait for the first build of the route's tokenizer (half a
// second, seconds on a loaded machine, which outlasted a shutdown's last
// writes and cut the stream quietly): until the tokenizer is built, the
// input is estimated from the body's bytes (EstimateJSON). Not parallel: it
// replaces counterBuilt.
func TestChargeAtEndDoesNotBuildTheTokenizer(t *testing.T) {
	body := []byte(`{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"what is the capital of France, and why?"}]}`)
	exact := estimate(&pipeline.Request{Model: "gpt-x", Body: body})
	rough := int64(contextedit.EstimateJSON(body))
	if exact == rough {
		t.Fatalf("the body's count %d is its rough estimate too: pick another body", exact)
	}
	for _, built := range []bool{false, true} {
		counterBuilt = func(string) bool { return built }
		at := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
		l := newLimiterAt(t, "", NewMemoryStore, "w", func() time.Time { return at })
		up := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
			return &pipeline.Response{Stream: &chunkStream{chunks: []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
				`{"choices":[{"index":0,"delta":{"content":"Paris"}}]}`,
			}}}, nil
		})
		r := &pipeline.Request{Model: "gpt-x", Stream: true, Meta: &pipeline.Meta{}, Tenant: &pipeline.Tenant{Name: "w"}, Body: body}
		resp, err := l.Meter(up).Chat(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := resp.Stream.Next(); err != nil {
				break
			}
		}
		resp.Stream.Close()
		l.Flush()
		report, err := l.Report(context.Background(), UsageQuery{From: at, To: at, GroupBy: "tenant"})
		if err != nil {
			t.Fatal(err)
		}
		want := rough
		if built {
			want = exact
		}
		if got := gjson.GetBytes(report, `data.#(group=="w").input_tokens`).Int(); got != want {
			t.Errorf("tokenizer built %v: charged %d input tokens, want %d (count %d, rough %d)", built, got, want, exact, rough)
		}
	}
	counterBuilt = contextedit.CounterBuilt
}

// TestTokenRulesBuildTheTokenizersAtStart: a token rule counts every
// request's input before its call, so a limiter with one builds its models'
// tokenizers in the background when it is made, not in its first request.
// A limiter without one builds none (r50k_base is no other test's here).
func TestTokenRulesBuildTheTokenizersAtStart(t *testing.T) {
	t.Parallel()
	const model = "\n[[models]]\nname = \"old\"\nprovider = \"up\"\nencoding = \"%s\"\n"
	newLimiter(t, fmt.Sprintf(model, "p50k_base")+"\n[[limits]]\ntenant = \"w\"\nrequests_per_minute = 5\n", NewMemoryStore, "")
	newLimiter(t, fmt.Sprintf(model, "r50k_base")+"\n[[limits]]\ntenant = \"w\"\ntokens_per_minute = 500\n", NewMemoryStore, "")
	deadline := time.Now().Add(time.Minute)
	for !contextedit.CounterBuilt("r50k_base") {
		if time.Now().After(deadline) {
			t.Fatal("a limiter with a token rule did not build its model's tokenizer in a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if contextedit.CounterBuilt("p50k_base") {
		t.Fatal("a limiter without a token rule built its model's tokenizer")
	}
}

// A call begun on a context already done (a fallback's next attempt after
// the client left) reaches no provider: it is not charged. One whose
// client leaves while it is under way is, its input estimated.
func TestAttemptAfterClientLeftIsFree(t *testing.T) {
	t.Parallel()
	at := time.Now().UTC().Truncate(24 * time.Hour).Add(36 * time.Hour)
	l := newLimiterAt(t, "", NewMemoryStore, "w", func() time.Time { return at })
	for _, before := range []bool{true, false} {
		ctx, cancel := context.WithCancel(context.Background())
		if before {
			cancel()
		}
		up := pipeline.HandlerFunc(func(ctx context.Context, _ *pipeline.Request) (*pipeline.Response, error) {
			cancel() // the client leaves while the call is under way
			return nil, ctx.Err()
		})
		tenant := fmt.Sprintf("w-%v", before)
		r := &pipeline.Request{Model: "gpt-x", Meta: &pipeline.Meta{}, Tenant: &pipeline.Tenant{Name: tenant},
			Body: []byte(`{"model":"gpt-x","messages":[{"role":"user","content":"a question long enough to estimate"}]}`)}
		if _, err := l.Meter(up).Chat(ctx, r); err == nil {
			t.Fatal("no error")
		}
		l.Flush()
		body, err := l.Report(context.Background(), UsageQuery{From: at, To: at, GroupBy: "tenant"})
		if err != nil {
			t.Fatal(err)
		}
		charged := gjson.GetBytes(body, `data.#(group=="`+tenant+`").input_tokens`).Int() > 0
		if charged == before {
			t.Errorf("cancelled before the call: %v; charged %v\n%s", before, charged, body)
		}
	}
}
