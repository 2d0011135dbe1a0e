// Command mockllm runs the scripted OpenAI-compatible model server on a TCP
// address, for benchmarks and manual tests.
//
// Models named fail-<status> (e.g. fail-429, fail-503) always answer that
// status with the OpenAI error envelope. Models named tools-<N> call the
// calculator tool once per round until the history holds N tool results,
// then answer. Any other model answers like the demo model, or with a fixed
// reply of -reply-bytes bytes when that is set.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/mockllm"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "address to listen on")
	firstByte := flag.Duration("first-byte-delay", 0, "delay before the first byte of each completion")
	chunkDelay := flag.Duration("chunk-delay", 0, "delay between stream events")
	textRunes := flag.Int("text-runes", 4, "runes per content delta")
	replyBytes := flag.Int("reply-bytes", 0, "answer every model with a fixed reply of this many bytes (0 = demo answers)")
	burst := flag.Bool("burst", false, "flush each stream only after its last event, so it reaches the socket in one burst (use with -chunk-delay 0)")
	stampHeld := flag.Bool("stamp-held", false, `put on every streamed chunk the time the mock held the request until it wrote the chunk ("x_mock_held_ns")`)
	debug := flag.Bool("debug", false, "log faults and refused requests")
	flag.Parse()

	level := zerolog.InfoLevel
	if *debug {
		level = zerolog.DebugLevel
	}
	log := zerolog.New(os.Stderr).Level(level).With().Timestamp().Logger()

	srv := mockllm.New(mockllm.Options{
		Respond:        responder(*replyBytes),
		FirstByteDelay: *firstByte,
		ChunkDelay:     *chunkDelay,
		StampHeld:      *stampHeld,
		Chunking:       mockllm.Chunking{TextRunes: *textRunes, Burst: *burst},
		MaxRecorded:    -1, // a load target must not grow
		Logger:         &log,
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mockllm:", err)
		os.Exit(1)
	}
	log.Info().Str("base_url", "http://"+ln.Addr().String()+"/v1").Msg("mockllm: serving")

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	select {
	case s := <-sig:
		log.Info().Str("signal", s.String()).Msg("mockllm: shutting down")
		_ = srv.Close()
	case err := <-errc:
		if err != nil {
			log.Error().Err(err).Msg("mockllm: serve failed")
			os.Exit(1)
		}
	}
}

// responder applies the by-model rules of the command.
func responder(replyBytes int) func(*mockllm.Call) mockllm.Turn {
	fixed := ""
	if replyBytes > 0 {
		const text = "The quick brown fox jumps over the lazy dog. "
		fixed = strings.Repeat(text, replyBytes/len(text)+1)[:replyBytes]
	}
	return func(c *mockllm.Call) mockllm.Turn {
		if rest, ok := strings.CutPrefix(c.Model, "fail-"); ok {
			if status, err := strconv.Atoi(rest); err == nil && status >= 400 && status <= 599 {
				f := mockllm.StatusFault(status, "", "")
				if status == 429 || status == 503 {
					f.RetryAfter = "1"
				}
				return mockllm.Turn{Fault: f}
			}
		}
		if rest, ok := strings.CutPrefix(c.Model, "tools-"); ok {
			return toolRounds(c, rest)
		}
		if fixed != "" {
			return mockllm.Turn{Text: fixed}
		}
		return mockllm.DemoResponder(c)
	}
}

// toolResults counts the tool results of a history: chat's tool messages
// and the Messages API's tool_result blocks.
func toolResults(body []byte) int {
	n := 0
	gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").Str == "tool" {
			n++
		}
		m.Get("content").ForEach(func(_, b gjson.Result) bool {
			if b.Get("type").Str == "tool_result" {
				n++
			}
			return true
		})
		return true
	})
	return n
}

// toolRounds is the tools-<N> rule: call the calculator once per round until
// the history holds N tool results, then answer (the bench's tool loop).
func toolRounds(c *mockllm.Call, n string) mockllm.Turn {
	want, _ := strconv.Atoi(n)
	done := toolResults(c.Body)
	switch {
	case done >= want:
		return mockllm.Turn{Text: "done after " + strconv.Itoa(done) + " tool rounds"}
	case !c.Offers("calculator"):
		return mockllm.Turn{Text: "no calculator tool was offered"}
	}
	args := `{"expression":"` + strconv.Itoa(done+1) + `*2"}`
	return mockllm.Turn{ToolCalls: []mockllm.ToolCall{{Name: "calculator", Arguments: args}}}
}
