package guardrails

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/jsonstring"
	"github.com/llmgw/gateway/pipeline"
)

// chunksOf returns text as chat.completion.chunk objects of n bytes each
// (cut on rune boundaries), with a finish chunk.
func chunksOf(text string, n int) [][]byte {
	var out [][]byte
	for len(text) > 0 {
		k := min(n, len(text))
		for k < len(text) && !strings.HasPrefix(text[k:], string([]rune(text[k:])[:1])) {
			k++
		}
		c := jsonstring.Append([]byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":`), text[:k])
		out = append(out, append(c, `},"finish_reason":null}]}`...))
		text = text[k:]
	}
	return append(out, []byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`))
}

type sliceStream struct {
	chunks [][]byte
	i      int
}

func (s *sliceStream) Next() ([]byte, error) {
	if s.i == len(s.chunks) {
		return nil, io.EOF
	}
	s.i++
	return s.chunks[s.i-1], nil
}
func (s *sliceStream) Close() {}

var _ pipeline.Stream = (*sliceStream)(nil)

// BenchmarkResponseStream is the whole response stage per chunk: reading
// the chunk's content, the scanner, and rewriting the chunks that carry
// released text.
func BenchmarkResponseStream(b *testing.B) {
	chunks := chunksOf(strings.Repeat("The quick brown fox jumps over the lazy dog; write to carol@example.net or pay with 4111 1111 1111 1111. ", 40), 6)
	g := mustGuard(b, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		s := newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{g}, nil)
		for {
			if _, err := s.Next(); err != nil {
				break
			}
		}
		n += len(chunks)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/chunk")
}

// Ollama and SGLang send "finish_reason":"" on every chunk. Taken for an end,
// it flushed the held text after every chunk, so a value split over two
// chunks went out unredacted. Only a reason ends a choice.
func TestStreamEmptyFinishReasonIsNoEnd(t *testing.T) {
	t.Parallel()
	text := "Mail me: alice@example.com, thanks."
	var chunks [][]byte
	for _, c := range chunksOf(text, 4) {
		chunks = append(chunks, []byte(strings.Replace(string(c), `"finish_reason":null`, `"finish_reason":""`, 1)))
	}
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Replacement: "[X]", Window: 32})
	s := newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{g}, nil)
	var got strings.Builder
	for {
		c, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString(gjson.GetBytes(c, "choices.0.delta.content").Str)
	}
	if want := "Mail me: [X], thanks."; got.String() != want {
		t.Fatalf("streamed %q, want %q", got.String(), want)
	}
}

// The usage chunk comes last. A choice that ended without a finish (an
// upstream cut short) left its held text and tool calls to the end of the
// stream, after the usage chunk; they now go out before it.
func TestStreamUsageChunkLast(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Window: 16})
	chunks := [][]byte{
		[]byte(chunkHead + `{"role":"assistant","content":"Mail bob@"}` + chunkTail),
		[]byte(chunkHead + `{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{}"}}]}` + chunkTail),
		[]byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`),
	}
	got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{g}, nil))
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, c := range got {
		seen = append(seen, gjson.GetBytes(c, "choices.0.delta").Raw+gjson.GetBytes(c, "usage").Raw)
	}
	if len(got) != 4 || !gjson.GetBytes(got[3], "usage").IsObject() {
		t.Fatalf("chunks %q: want the text, the call, then usage last", seen)
	}
}

// A tenant without response guardrails pays nothing for them: its stream
// is the upstream's, not wrapped, so nothing is held or scanned (another
// tenant's response guardrails wrap only that tenant's).
func TestNoResponseGuardrailsNoStream(t *testing.T) {
	t.Parallel()
	req := mustGuard(t, config.Guardrail{Name: "in", Stage: StageRequest, Kind: "regex", Action: "block", Patterns: []string{`x`}})
	out := mustGuard(t, config.Guardrail{Name: "out", Stage: StageResponse, Kind: "pii", Action: "redact"})
	e := &Engine{def: stages{StageRequest: {req}}, tenants: map[string]stages{"guarded": {StageResponse: {out}}}}
	src := &sliceStream{chunks: chunksOf("bob@example.com", 4)}
	next := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		return &pipeline.Response{Stream: src}, nil
	})
	h := e.Middleware()(next)
	for _, tc := range []struct {
		tenant  string
		wrapped bool
	}{{"plain", false}, {"guarded", true}} {
		resp, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(`{"messages":[]}`), Stream: true, Tenant: &pipeline.Tenant{Name: tc.tenant}})
		if err != nil {
			t.Fatal(err)
		}
		if wrapped := resp.Stream != pipeline.Stream(src); wrapped != tc.wrapped {
			t.Errorf("tenant %s: stream wrapped %v, want %v", tc.tenant, wrapped, tc.wrapped)
		}
	}
}

// Every choice of a chunk is judged: a chunk with several choices (or the
// same index twice) is handled as one chunk per choice, each with the
// chunk's envelope and a single choice.
func TestStreamJudgesEveryChoiceOfAChunk(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	const head = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[`
	tests := []struct {
		name   string
		chunks []string
	}{
		{"two choices", []string{
			head + `{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null},{"index":1,"delta":{"role":"assistant","content":"mail bob@example.com","tool_calls":[{"index":0,"id":"x","type":"function","function":{"name":"f","arguments":"{\"e\":\"bob@example.com\"}"}}]},"finish_reason":null}]}`,
			head + `{"index":0,"delta":{},"finish_reason":"stop"},{"index":1,"delta":{},"finish_reason":"stop"}]}`,
		}},
		{"one index twice", []string{
			head + `{"index":0,"delta":{"role":"assistant","content":"mail "},"finish_reason":null},{"index":0,"delta":{"content":"bob@example.com"},"finish_reason":null}]}`,
			head + `{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"total_tokens":3}}`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var chunks [][]byte
			for _, c := range tt.chunks {
				chunks = append(chunks, []byte(c))
			}
			got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{pii}, nil))
			if err != nil {
				t.Fatal(err)
			}
			usage := 0
			for _, c := range got {
				if strings.Contains(string(c), "bob@example.com") {
					t.Errorf("the address went out: %s", c)
				}
				if n := len(gjson.GetBytes(c, "choices").Array()); n > 1 {
					t.Errorf("a chunk with %d choices: %s", n, c)
				}
				if gjson.GetBytes(c, "usage").Exists() {
					usage++
				}
			}
			if want := strings.Count(strings.Join(tt.chunks, ""), `"usage"`); usage != want {
				t.Errorf("%d chunks with usage, want %d", usage, want)
			}
		})
	}
}

// A chunk's usage goes out once, on the stream's last chunk, when the
// chunk is split by choice: not dropped with a piece whose text is held,
// not copied by the template of a text's first chunk into its flush, not
// dropped with a choice past maxChoices, and after the text held at the
// end.
func TestStreamSplitChunkUsageOnceLast(t *testing.T) {
	t.Parallel()
	pii := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	const head = `{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[`
	const usage = `"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}`
	tests := []struct {
		name   string
		chunks []string
		want   [2]string // each choice's content, joined
	}{
		{"held text", []string{
			head + `{"index":0,"delta":{"role":"assistant","content":"hello "},"finish_reason":null},{"index":1,"delta":{"role":"assistant","content":"mail "},"finish_reason":null}]}`,
			head + `{"index":0,"delta":{"content":"there"},"finish_reason":null},{"index":1,"delta":{"content":"bob"},"finish_reason":null}],` + usage,
		}, [2]string{"hello there", "mail bob"}},
		{"first text", []string{
			head + `{"index":0,"delta":{"role":"assistant","content":"hello"},"finish_reason":null},{"index":1,"delta":{"role":"assistant","content":"mail bob"},"finish_reason":null}],` + usage,
		}, [2]string{"hello", "mail bob"}},
		{"past maxChoices", []string{
			head + `{"index":0,"delta":{"role":"assistant","content":"hello"},"finish_reason":null},{"index":20,"delta":{"role":"assistant","content":"x"},"finish_reason":null}],` + usage,
		}, [2]string{"hello", ""}},
		{"one choice", []string{
			head + `{"index":0,"delta":{"role":"assistant","content":"hello"},"finish_reason":null}],` + usage,
		}, [2]string{"hello", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var chunks [][]byte
			for _, c := range tt.chunks {
				chunks = append(chunks, []byte(c))
			}
			got, err := drainStream(newStream(context.Background(), &sliceStream{chunks: chunks}, []*guard{pii}, nil))
			if err != nil {
				t.Fatal(err)
			}
			var text [2]string
			n := 0
			for k, c := range got {
				if gjson.GetBytes(c, "usage").IsObject() {
					n++
					if k != len(got)-1 {
						t.Errorf("usage on chunk %d of %d: %s", k+1, len(got), c)
					}
					if cs := gjson.GetBytes(c, "choices"); !cs.IsArray() || len(cs.Array()) != 0 {
						t.Errorf("usage chunk with choices %s", cs.Raw)
					}
					for _, key := range []string{"id", "object", "created", "model"} {
						if !gjson.GetBytes(c, key).Exists() {
							t.Errorf("usage chunk without %s: %s", key, c)
						}
					}
				}
				for _, ch := range gjson.GetBytes(c, "choices").Array() {
					if i := ch.Get("index").Int(); i < 2 {
						text[i] += ch.Get("delta.content").Str
					}
				}
			}
			if n != 1 {
				t.Errorf("%d usage chunks, want 1: %s", n, bytes.Join(got, []byte("\n")))
			}
			if text != tt.want {
				t.Errorf("texts %q, want %q", text, tt.want)
			}
		})
	}
}

// Response guardrails judge text: an audio answer would say what they
// redact or block in its transcript, so a request for one is refused where
// they apply (its transcript reached the client unjudged, JSON and stream),
// and passes where they do not.
func TestAudioRefusedUnderResponseGuardrails(t *testing.T) {
	t.Parallel()
	out := mustGuard(t, config.Guardrail{Name: "out", Stage: StageResponse, Kind: "pii", Action: "redact"})
	e := &Engine{tenants: map[string]stages{"guarded": {StageResponse: {out}}}}
	called := 0
	next := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) {
		called++
		return &pipeline.Response{Body: []byte(`{"choices":[]}`)}, nil
	})
	h := e.Middleware()(next)
	for _, tc := range []struct {
		tenant, body string
		refused      bool
	}{
		{"guarded", `{"modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"},"messages":[]}`, true},
		{"guarded", `{"audio":{"voice":"alloy"},"messages":[]}`, true},
		{"guarded", `{"Modalities":["text","AUDIO"],"messages":[]}`, true}, // an upstream may read names in any case
		{"guarded", `{"AUDIO":{"voice":"alloy","format":"wav"},"messages":[]}`, true},
		{"guarded", `{"modalities":["text"],"audio":null,"messages":[]}`, false},
		{"plain", `{"modalities":["text","audio"],"audio":{"voice":"alloy","format":"wav"},"messages":[]}`, false},
	} {
		before := called
		_, err := h.Chat(context.Background(), &pipeline.Request{Body: []byte(tc.body), Tenant: &pipeline.Tenant{Name: tc.tenant}})
		var pe *pipeline.Error
		refused := errors.As(err, &pe) && pe.Status == 400 && pe.Param == "modalities"
		if refused != tc.refused || (called > before) == tc.refused {
			t.Errorf("%s %s: err %v, upstream called %v", tc.tenant, tc.body, err, called > before)
		}
	}
}

// failingStream is sliceStream that fails with err after its chunks.
type failingStream struct {
	sliceStream
	err error
}

func (s *failingStream) Next() ([]byte, error) {
	if s.i == len(s.chunks) {
		return nil, s.err
	}
	return s.sliceStream.Next()
}

// An upstream failure after some text: the text held back for judging
// goes out (judged) before the failure, as it would without a guardrail;
// it was dropped, so a client that had been shown nothing lost text the
// upstream sent (a chaos probe).
func TestStreamFailureReleasesHeldText(t *testing.T) {
	t.Parallel()
	chunks := chunksOf("Hi there, mail alice@example.com", 4)
	chunks = chunks[:len(chunks)-1] // no finish: the upstream fails instead
	cut := errors.New("upstream cut")
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Replacement: "[X]", Window: 32})
	got, err := drainStream(newStream(context.Background(), &failingStream{sliceStream{chunks: chunks}, cut}, []*guard{g}, nil))
	if !errors.Is(err, cut) {
		t.Fatalf("err %v, want the upstream's failure", err)
	}
	var text strings.Builder
	for _, c := range got {
		text.WriteString(gjson.GetBytes(c, "choices.0.delta.content").Str)
	}
	if want := "Hi there, mail [X]"; text.String() != want {
		t.Fatalf("before the failure %q, want %q", text.String(), want)
	}
}

// A failure once the client has left releases nothing: the held text is
// not judged (an http guardrail would fail closed on the ended context and
// count a block the client never caused; a review).
func TestStreamFailureAfterTheClientLeftReleasesNothing(t *testing.T) {
	t.Parallel()
	chunks := chunksOf("Hi there", 4)
	chunks = chunks[:len(chunks)-1]
	cut := errors.New("upstream cut")
	ctx, cancel := context.WithCancel(context.Background())
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Replacement: "[X]", Window: 32})
	s := newStream(ctx, &failingStream{sliceStream{chunks: chunks}, cut}, []*guard{g}, nil)
	cancel()
	got, err := drainStream(s)
	if !errors.Is(err, cut) {
		t.Fatalf("err %v, want the upstream's failure", err)
	}
	for _, c := range got {
		if gjson.GetBytes(c, "choices.0.delta.content").Str != "" {
			t.Fatalf("text released after the client left: %s", c)
		}
	}
}
