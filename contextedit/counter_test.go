package contextedit

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pkoukk/tiktoken-go"
)

func counter(t testing.TB, enc string) *Counter {
	t.Helper()
	c, err := CounterFor(enc)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Published values: the OpenAI cookbook "How to count tokens with tiktoken"
// (its encode and compare_encodings examples).
func TestCountTextPublished(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, enc, text string
		ids             []int
		n               int
	}{
		{name: "o200k hello world", enc: "o200k_base", text: "hello world", n: 2},
		{name: "cl100k hello world", enc: "cl100k_base", text: "hello world", n: 2},
		{name: "cl100k tiktoken", enc: "cl100k_base", text: "tiktoken is great!", ids: []int{83, 1609, 5963, 374, 2294, 0}, n: 6},
		{name: "o200k tiktoken", enc: "o200k_base", text: "tiktoken is great!", n: 6},
		{name: "cl100k arithmetic", enc: "cl100k_base", text: "2 + 2 = 4", ids: []int{17, 489, 220, 17, 284, 220, 19}, n: 7},
		{name: "o200k arithmetic", enc: "o200k_base", text: "2 + 2 = 4", ids: []int{17, 659, 220, 17, 314, 220, 19}, n: 7},
		{name: "cl100k japanese", enc: "cl100k_base", text: "お誕生日おめでとう", n: 9},
		{name: "o200k japanese", enc: "o200k_base", text: "お誕生日おめでとう", ids: []int{8930, 9697, 243, 128225, 8930, 17693, 4344, 48669}, n: 8},
		{name: "cl100k antidis", enc: "cl100k_base", text: "antidisestablishmentarianism", n: 6},
		{name: "default encoding", enc: "", text: "hello world", n: 2},
		{name: "empty", enc: "o200k_base", text: "", n: 0},
		{name: "special token is text", enc: "cl100k_base", text: "<|endoftext|>", n: 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := counter(t, tt.enc)
			if got := c.CountText(tt.text); got != tt.n {
				t.Errorf("CountText(%q) = %d, want %d", tt.text, got, tt.n)
			}
			if got := c.CountText(tt.text); got != tt.n { // cached
				t.Errorf("cached CountText(%q) = %d, want %d", tt.text, got, tt.n)
			}
			if tt.ids != nil {
				if got := c.enc.EncodeOrdinary(tt.text); !slices.Equal(got, tt.ids) {
					t.Errorf("ids = %v, want %v", got, tt.ids)
				}
			}
		})
	}
}

// cookbookMessages is the cookbook's example_messages; it reports 129 prompt
// tokens for gpt-4-0613 (cl100k_base) and 124 for gpt-4o (o200k_base).
const cookbookMessages = `{"model":"gpt-4","messages":[
{"role":"system","content":"You are a helpful, pattern-following assistant that translates corporate jargon into plain English."},
{"role":"system","name":"example_user","content":"New synergies will help drive top-line growth."},
{"role":"system","name":"example_assistant","content":"Things working great together will increase revenue."},
{"role":"system","name":"example_user","content":"Let's circle back when we have more bandwidth to touch base on opportunities for increased leverage."},
{"role":"system","name":"example_assistant","content":"Let's talk later when we're less busy about how to do better."},
{"role":"user","content":"This late pivot means we don't have time to boil the ocean for the client deliverable."}]}`

func TestCount(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, enc, body string
		want            int
		err             error
	}{
		{name: "cookbook cl100k", enc: "cl100k_base", body: cookbookMessages, want: 129},
		{name: "cookbook o200k", enc: "o200k_base", body: cookbookMessages, want: 124},
		// 3 priming + 3 + "user"(1) + "hello world"(2)
		{name: "one message", enc: "o200k_base", body: `{"messages":[{"role":"user","content":"hello world"}]}`, want: 9},
		// parts: text counted, image a fixed 85
		{name: "parts", enc: "o200k_base", body: `{"messages":[{"role":"user","content":[{"type":"text","text":"hello world"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`, want: 9 + 85},
		// assistant: 3 + role(1) + call(3 + "f"(1) + "{}"(1)); tool: 3 + role(1) + id "c1"(2?) + "ok"(1)
		{name: "tool round", enc: "o200k_base", body: `{"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`, want: 3 + 3 + 1 + 3 + 1 + 1},
		{name: "tools json", enc: "o200k_base", body: `{"messages":[],"tools":[{"type":"function","function":{"name":"f"}}]}`, want: 3 + len(mustEncode(t, "o200k_base", `[{"type":"function","function":{"name":"f"}}]`))},
		{name: "not json", enc: "o200k_base", body: `nope`, err: ErrInvalidBody},
		{name: "no messages", enc: "o200k_base", body: `{"model":"x"}`, err: ErrInvalidBody},
		{name: "messages not array", enc: "o200k_base", body: `{"messages":{}}`, err: ErrInvalidBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := counter(t, tt.enc).Count([]byte(tt.body))
			if !errors.Is(err, tt.err) {
				t.Fatalf("err = %v, want %v", err, tt.err)
			}
			if got != tt.want {
				t.Errorf("Count = %d, want %d", got, tt.want)
			}
			if err == nil {
				if b := cheapBound([]byte(tt.body)); b < got {
					t.Errorf("cheapBound = %d < count %d", b, got)
				}
			}
		})
	}
}

func mustEncode(t testing.TB, enc, s string) []int {
	return counter(t, enc).enc.EncodeOrdinary(s)
}

func TestCounterFor(t *testing.T) {
	t.Parallel()
	a, b := counter(t, "cl100k_base"), counter(t, "cl100k_base")
	if a != b {
		t.Error("CounterFor built a second cl100k_base counter")
	}
	if a.Encoding() != "cl100k_base" {
		t.Errorf("Encoding() = %q", a.Encoding())
	}
	if _, err := CounterFor("nope_base"); err == nil {
		t.Error("CounterFor(nope_base) succeeded")
	}
}

// TestCountJSON: a body of any form counts its keys and strings as text
// and a number as one token; an image (a URL, data URL or base64 under an
// image key) as one image; a file's base64 by its bytes; and no text passes
// for media outside those keys, however it looks.
func TestCountJSON(t *testing.T) {
	t.Parallel()
	c, err := CounterFor("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	text := func(ss ...string) int {
		n := 0
		for _, s := range ss {
			n += c.CountText(s)
		}
		return n
	}
	b64 := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", 1<<15) // 768 KiB of base64
	tests := []struct {
		name string
		body string
		want int
	}{
		{"embeddings text", `{"model":"e","input":"hello world"}`, text("model", "e", "input", "hello world")},
		{"token ids", `{"model":"e","input":[[1,2,3],[4]]}`, text("model", "e", "input") + 4},
		{"data URL image", `{"input":[{"type":"input_image","image_url":"data:image/png;base64,` + b64 + `"}]}`,
			text("input", "type", "input_image", "image_url") + tokensPerImage},
		{"chat-style image URL", `{"image_url":{"url":"https://x/y.png"}}`, text("image_url", "url") + tokensPerImage},
		{"file data by its bytes", `{"file_data":"data:application/pdf;base64,` + b64 + `"}`,
			text("file_data") + (len("data:application/pdf;base64,")+len(b64)+3)/4},
		{"short base64-like word is text", `{"input":"abcDEF123"}`, text("input", "abcDEF123")},
		{"not JSON", `hello there!`, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := c.CountJSON([]byte(tt.body)); got != tt.want {
				t.Errorf("CountJSON = %d, want %d", got, tt.want)
			}
		})
	}

	// Text that looks like media, or hides in keys, is still counted as
	// text: at least a token per 8 bytes (a provider reads it as text).
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2000) // 90 KB
	for name, body := range map[string]string{
		"a data: prefix on prose":    `{"prompt":"data:` + prose + `"}`,
		"a data URL in a text field": `{"prompt":"data:image/png;base64,` + b64[:90000] + `"}`,
		"snake_case prose":           `{"input":"` + strings.Repeat("the_quick_brown_fox_jumps_over_the_lazy_dog_", 2000) + `"}`,
		"a DNA sequence":             `{"input":"` + strings.Repeat("ACGTTGCAAGCT", 7500) + `"}`,
		"hex":                        `{"input":"` + strings.Repeat("0123456789abcdef", 5600) + `"}`,
		"a long key":                 `{"tools":[{"parameters":{"properties":{"` + prose + `":{}}}}]}`,
		"emoji past the budget":      `{"input":"` + strings.Repeat("😀", 300<<8) + `"}`,
	} {
		if got := c.CountJSON([]byte(body)); got < len(body)/8 {
			t.Errorf("%s: %d tokens for %d bytes", name, got, len(body))
		}
	}
	// Nesting deeper than maxCountDepth is estimated, without recursion.
	deep := strings.Repeat("[", 100000) + `"x"` + strings.Repeat("]", 100000)
	if got := c.CountJSON([]byte(deep)); got <= 0 || got > len(deep) {
		t.Errorf("deep nesting: %d", got)
	}
}

// FuzzCountJSON: any bytes count without a panic, to at least zero and at
// most about a token per byte.
func FuzzCountJSON(f *testing.F) {
	c, err := CounterFor("o200k_base")
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(`{"model":"e","input":["hello",[1,2]]}`))
	f.Add([]byte(`{"x":"data:image/png;base64,AAAA"}`))
	f.Add([]byte(`[[[[{"a":"\u00e9"}]]]]`))
	f.Fuzz(func(t *testing.T, body []byte) {
		n := c.CountJSON(body)
		if n < 0 || n > len(body)+tokensPerImage*len(body) {
			t.Fatalf("CountJSON = %d for %d bytes", n, len(body))
		}
		if e := EstimateJSON(body); e < 0 || e > len(body)+tokensPerImage*len(body) {
			t.Fatalf("EstimateJSON = %d for %d bytes", e, len(body))
		}
	})
}

// TestEstimateJSON: without a tokenizer, text is estimated from its bytes
// and media count as CountJSON counts them: a 4 MiB image is an image, not
// a million tokens of text.
func TestEstimateJSON(t *testing.T) {
	t.Parallel()
	b64 := strings.Repeat("iVBORw0KGgoAAAANSUhEUgAA", 4<<20/24)
	chat := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is in this picture?"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,` + b64 + `"}}]}]}`
	if n := EstimateJSON([]byte(chat)); n < tokensPerImage || n > tokensPerImage+100 {
		t.Errorf("a chat body with a 4 MiB image: %d tokens, want about one image's %d", n, tokensPerImage)
	}
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 100)
	if n := EstimateJSON([]byte(`{"input":"` + prose + `"}`)); n < len(prose)/5 || n > len(prose)/3 {
		t.Errorf("%d bytes of prose: %d tokens, want about a token per four bytes", len(prose), n)
	}
}

// TestCounterDropsUnreadTables: a Counter's encoder holds neither the
// decoder nor the sorted copy of the vocabulary (13.8 of o200k_base's
// 23.6 MB), and counts what an untouched encoder of the same encoding
// counts. It fails when a tiktoken-go version renames the tables (they
// stay), or starts to read them when it counts (the counts differ).
func TestCounterDropsUnreadTables(t *testing.T) {
	corpus := []string{"", "hello world", "\n\n  \n \t's", "func main() {\n\tfmt.Println(\"日本語 😀\")\n}\n",
		"<|endoftext|> and <|im_start|> as text", "12345678901234567890", "don't I'M we'll", "\xff\xfe invalid", strings.Repeat("token ", 500)}
	for _, name := range []string{"o200k_base", "cl100k_base"} {
		c, err := CounterFor(name)
		if err != nil {
			t.Fatal(err)
		}
		if n := droppedUnread(c.enc); n != len(unreadTables) {
			t.Fatalf("%s: %d of the %d unread tables dropped", name, n, len(unreadTables))
		}
		whole, err := tiktoken.GetEncoding(name)
		if err != nil {
			t.Fatal(err)
		}
		if droppedUnread(whole) != 0 {
			t.Fatalf("%s: a fresh encoder has tables dropped", name)
		}
		for _, s := range corpus {
			if got, want := len(c.enc.EncodeOrdinary(s)), len(whole.EncodeOrdinary(s)); got != want {
				t.Errorf("%s %q: %d tokens without the tables, %d with", name, s, got, want)
			}
		}
	}
}

// droppedUnread reports how many of enc's unreadTables are nil.
func droppedUnread(enc *tiktoken.Tiktoken) int {
	core, ok := coreOf(enc)
	if !ok {
		return 0
	}
	n := 0
	for _, name := range unreadTables {
		if f := core.FieldByName(name); f.IsValid() && (f.Kind() == reflect.Map || f.Kind() == reflect.Slice) && f.IsNil() {
			n++
		}
	}
	return n
}
