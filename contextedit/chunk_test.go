package contextedit

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// realisticTexts are long strings of the kinds tool results hold.
func realisticTexts() map[string]string {
	var prose, code, md, cjk strings.Builder
	type rec struct {
		ID    int               `json:"id"`
		Name  string            `json:"name"`
		Email string            `json:"email"`
		Tags  []string          `json:"tags"`
		Price float64           `json:"price"`
		Attrs map[string]string `json:"attrs"`
	}
	var recs []rec
	for i := range 300 {
		fmt.Fprintf(&prose, "Paragraph %d: The committee's report (dated 2024-03-%02d) didn't say why revenue fell by %d.%d%% — analysts weren't sure; \"it's complicated,\" one said. ", i, i%28+1, i%17, i%10)
		fmt.Fprintf(&code, "func handler%d(w http.ResponseWriter, r *http.Request) {\n\tif err := r.ParseForm(); err != nil {\n\t\thttp.Error(w, err.Error(), 400) // line %d\n\t\treturn\n\t}\n}\n", i, i)
		fmt.Fprintf(&md, "| %d | Oslo-%d | %0.2f | ok/warn |\n", i, i, float64(i)*1.25)
		fmt.Fprintf(&cjk, "第%d章：東京とOsloの天気は晴れ,気温%d度。한국어 텍스트,テスト。", i, i%30)
		recs = append(recs, rec{ID: i, Name: fmt.Sprintf("User Number%d", i), Email: fmt.Sprintf("user%d@example.com", i),
			Tags: []string{"alpha", "beta-" + fmt.Sprint(i)}, Price: float64(i) * 3.3, Attrs: map[string]string{"city": "Oslo", "zip": fmt.Sprint(1000 + i)}})
	}
	minified, _ := json.Marshal(recs)
	pretty, _ := json.MarshalIndent(recs, "", "  ")
	return map[string]string{"prose": prose.String(), "code": code.String(), "markdown": md.String(), "cjk": cjk.String(),
		"json minified": string(minified), "json pretty": string(pretty)}
}

// Cutting only at exact piece boundaries must not change the count.
func TestEncodeLenExact(t *testing.T) {
	t.Parallel()
	for name, text := range realisticTexts() {
		for _, enc := range []string{"o200k_base", "cl100k_base"} {
			t.Run(name+" "+enc, func(t *testing.T) {
				t.Parallel()
				c := counter(t, enc)
				if len(text) < 4*chunkMax {
					t.Fatalf("text too short: %d", len(text))
				}
				want := len(c.enc.EncodeOrdinary(text))
				if got := c.encodeLen(text); got != want {
					t.Errorf("encodeLen = %d, whole = %d", got, want)
				}
			})
		}
	}
}

func TestSplitPoint(t *testing.T) {
	t.Parallel()
	pad := strings.Repeat("x", chunkMax-10)
	tests := []struct {
		name string
		s    string
		want int
	}{
		{name: "space before word", s: pad + "abc def" + strings.Repeat("y", 20), want: len(pad) + 3},
		{name: "punct after letter", s: pad + "abc,def" + strings.Repeat("y", 20), want: len(pad) + 3},
		{name: "apostrophe is not a cut", s: pad + "abc'sdef" + strings.Repeat("y", 20), want: runCut},
		{name: "double space is not a cut", s: pad + "ab  def" + strings.Repeat("y", 20), want: runCut},
		{name: "run cut at rune boundary", s: strings.Repeat("é", chunkMax), want: runCut},
		{name: "run cut inside rune moves back", s: "a" + strings.Repeat("é", chunkMax), want: runCut - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := splitPoint(tt.s); got != tt.want {
				t.Errorf("splitPoint = %d, want %d", got, tt.want)
			}
		})
	}
}

// Long single pieces are cut, so counting stays fast and close.
func TestCountTextLongRuns(t *testing.T) {
	t.Parallel()
	c := counter(t, "o200k_base")
	for _, s := range []string{strings.Repeat(" ", 200000) + "x", strings.Repeat("A", 200000), strings.Repeat("1", 200000),
		strings.Repeat("é", 100000), strings.Repeat("\n", 200000), strings.Repeat("!", 200000)} {
		if n := c.CountText(s); n <= 0 || n > len(s) {
			t.Errorf("CountText(len %d) = %d", len(s), n)
		}
	}
}
