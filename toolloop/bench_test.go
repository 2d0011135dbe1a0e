package toolloop

import (
	"bytes"
	"context"
	"io"
	"strconv"
	"testing"

	"github.com/llmgw/gateway/config"
	"github.com/llmgw/gateway/pipeline"
)

// instantModel answers with pre-built chunks (or bodies): turn i of a
// request is chosen by the number of tool messages already in its history.
type instantModel struct {
	rounds [][][]byte // per turn, the chunks
	bodies [][]byte
}

func (m *instantModel) Chat(_ context.Context, r *pipeline.Request) (*pipeline.Response, error) {
	n := min(countTools(r.Body), len(m.bodies)-1)
	if !r.Stream {
		return &pipeline.Response{Body: m.bodies[n]}, nil
	}
	chunks, i := m.rounds[n], 0
	return &pipeline.Response{Stream: &pipeline.StreamFunc{NextFunc: func() ([]byte, error) {
		if i == len(chunks) {
			return nil, io.EOF
		}
		i++
		return chunks[i-1], nil
	}}}, nil
}

// countTools counts `"role":"tool",` without parsing (benchmark plumbing).
func countTools(b []byte) int { return bytes.Count(b, []byte(`"role":"tool",`)) }

const benchIterations = 3 // tool rounds before the answer

func newInstantModel() *instantModel {
	m := &instantModel{}
	for i := 0; i < benchIterations; i++ {
		id := "c" + strconv.Itoa(i)
		var rs [][]byte
		for _, c := range toolRound("up", id, "calculator", `{"expression":"`+strconv.Itoa(i)+`*2+1"}`, 100, 10) {
			rs = append(rs, []byte(c))
		}
		m.rounds = append(m.rounds, rs)
		m.bodies = append(m.bodies, []byte(completion("up", "", `[{"id":"`+id+`","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"1+1\"}"}}]`, "tool_calls", 100, 10)))
	}
	var rs [][]byte
	for _, c := range textRound("up", "The answer is forty two, as computed.", 100, 10) {
		rs = append(rs, []byte(c))
	}
	m.rounds = append(m.rounds, rs)
	m.bodies = append(m.bodies, []byte(completion("up", "The answer is forty two.", "", "stop", 100, 10)))
	return m
}

// BenchmarkLoopIteration measures the loop's own cost per tool round (model
// and tool time excluded: the model answers instantly, the tool is the
// builtin calculator). ns/iter is per model round trip + tool call.
func BenchmarkLoopIteration(b *testing.B) {
	for _, stream := range []bool{true, false} {
		name := "blocking"
		body := userBody + `}`
		if stream {
			name = "stream"
			body = userBody + `,"stream":true,"stream_options":{"include_usage":true}}`
		}
		b.Run(name, func(b *testing.B) {
			m := newInstantModel()
			l := newLoop(b, []config.Tool{calcTool, timeTool}, nil)
			req := request(m, stream, body)
			b.ReportAllocs()
			for b.Loop() {
				chatAndDrain(b, l, req)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(benchIterations+1), "ns/iter")
		})
	}
}

// chatAndDrain serves req and reads a streamed answer to its end.
func chatAndDrain(b *testing.B, l *Loop, req *pipeline.Request) {
	resp, err := l.Chat(context.Background(), req)
	if err != nil {
		b.Fatal(err)
	}
	if resp.Stream == nil {
		return
	}
	defer resp.Stream.Close()
	for {
		if _, err := resp.Stream.Next(); err != nil {
			if err != io.EOF {
				b.Fatal(err)
			}
			return
		}
	}
}

// BenchmarkFastPath compares the loop's fast path with calling the model
// layer directly.
func BenchmarkFastPath(b *testing.B) {
	resp := &pipeline.Response{Body: []byte(`{}`)}
	h := pipeline.HandlerFunc(func(context.Context, *pipeline.Request) (*pipeline.Response, error) { return resp, nil })
	for _, tc := range []struct {
		name  string
		tools []config.Tool
		body  string
		loop  bool
	}{
		{"direct", nil, userBody + `}`, false},
		{"no server tools", nil, userBody + `}`, true},
		{"tools for other models", []config.Tool{{Name: "calculator", Kind: "builtin", Models: []string{"claude-*"}}}, userBody + `}`, true},
		{"tool_choice none", []config.Tool{calcTool}, userBody + `,"tool_choice":"none"}`, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l := newLoop(b, tc.tools, nil)
			req := request(h, false, tc.body)
			var handler pipeline.Handler = h
			if tc.loop {
				handler = l
			}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := handler.Chat(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
