package sse

import (
	"io"
	"strings"
	"testing"
)

func TestAppend(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		got  []byte
		want string
	}{
		{"data", AppendData(nil, []byte(`{"a":1}`)), "data: {\"a\":1}\n\n"},
		{"data appends", AppendData([]byte("x"), []byte("y")), "xdata: y\n\n"},
		{"comment", AppendComment(nil, []byte("keep-alive")), ": keep-alive\n\n"},
		{"keepalive var", KeepAlive, ": keep-alive\n\n"},
		{"error", AppendError(nil, []byte(`{"error":{"message":"m","type":"server_error","param":null,"code":null}}`)),
			"event: error\ndata: {\"error\":{\"message\":\"m\",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n"},
		{"done", Done, "data: [DONE]\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if string(tt.got) != tt.want {
				t.Fatalf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
}

func TestAppendRoundTrip(t *testing.T) {
	t.Parallel()
	var b []byte
	b = AppendComment(b, []byte("keep-alive"))
	b = AppendData(b, []byte(`{"x":"é"}`))
	b = AppendError(b, []byte(`{"error":{}}`))
	b = append(b, Done...)
	got, err := readAll(NewReader(strings.NewReader(string(b)), 0))
	if err != io.EOF {
		t.Fatal(err)
	}
	want := []ev{{"-", `{"x":"é"}`}, {"error", `{"error":{}}`}, {"-", "[DONE]"}}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("event %d = %q, want %q", i, got[i], want[i])
		}
	}
}

func TestAppendNoAlloc(t *testing.T) {
	dst := make([]byte, 0, 1024)
	data := []byte(`{"id":"x","choices":[]}`)
	allocs := testing.AllocsPerRun(100, func() {
		b := AppendData(dst[:0], data)
		b = AppendComment(b, []byte("keep-alive"))
		_ = AppendError(b, data)
	})
	if allocs != 0 {
		t.Fatalf("allocs = %v, want 0", allocs)
	}
}

func BenchmarkAppendData(b *testing.B) {
	data := []byte(`{"id":"chatcmpl-gw1","object":"chat.completion.chunk","created":1767225600,"model":"gpt-x","choices":[{"index":0,"delta":{"content":"Hello there"},"logprobs":null,"finish_reason":null}],"usage":null}`)
	dst := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendData(dst[:0], data)
	}
}
