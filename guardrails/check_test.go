package guardrails

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/llmgw/gateway/config"
)

func mustGuard(t testing.TB, c config.Guardrail) *guard {
	t.Helper()
	if c.Replacement == "" {
		c.Replacement = "[REDACTED]"
	}
	if c.Window == 0 {
		c.Window = 128
	}
	if c.Kind == "pii" && len(c.PII) == 0 {
		c.PII = config.PIIKinds
	}
	g, err := compile(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestPIIDetectors(t *testing.T) {
	t.Parallel()
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"})
	for _, tc := range []struct{ name, in, want string }{
		{"email", "write to bob.smith+x@mail.example.org now", "write to [REDACTED] now"},
		{"card with luhn", "card 4111 1111 1111 1111 ok", "card [REDACTED] ok"},
		{"card failing luhn", "order 4111 1111 1111 1112 ok", "order 4111 1111 1111 1112 ok"},
		{"iban", "IBAN DE89 3704 0044 0532 0130 00 thanks", "IBAN [REDACTED] thanks"},
		{"iban bad checksum", "ref DE00 3704 0044 0532 0130 00", "ref DE00 3704 0044 0532 0130 00"},
		{"phone", "call +47 912 34 567 today", "call [REDACTED] today"},
		{"openai key", "key sk-proj-abcdefghijklmnopqrstuvwx1234 here", "key [REDACTED] here"},
		{"aws key", "AKIAIOSFODNN7EXAMPLE", "[REDACTED]"},
		{"prose", "The year 2024 had 365 days.", "The year 2024 had 365 days."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := newChecker(context.Background(), []*guard{g}, nil).Check([]byte(tc.in))
			if err != nil || string(out) != tc.want {
				t.Errorf("got %q, %v; want %q", out, err, tc.want)
			}
		})
	}
}

// TestStreamedMatchSplitAcrossChunks: a value split over many chunks is
// caught whole, at every split size, and no text is lost or repeated.
func TestStreamedMatchSplitAcrossChunks(t *testing.T) {
	t.Parallel()
	text := strings.Repeat("Lorem ipsum dolor sit amet. ", 12) + "Mail me: alice@example.com, or card 4111-1111-1111-1111. " + strings.Repeat("Ünïcødé text goes on. ", 10)
	want := strings.Replace(strings.Replace(text, "alice@example.com", "[X]", 1), "4111-1111-1111-1111", "[X]", 1)
	g := mustGuard(t, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Replacement: "[X]", Window: 32})
	for _, size := range []int{1, 3, 7, 16, 50, len(text)} {
		ck := newChecker(context.Background(), []*guard{g}, nil)
		var got []byte
		for i := 0; i < len(text); i += size {
			out, err := ck.Feed([]byte(text[i:min(i+size, len(text))]))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out...)
		}
		out, err := ck.Flush()
		if err != nil {
			t.Fatal(err)
		}
		if got = append(got, out...); string(got) != want {
			t.Errorf("size %d:\n got %q\nwant %q", size, got, want)
		}
	}
}

func TestBlockFlagAndMaxLength(t *testing.T) {
	t.Parallel()
	block := mustGuard(t, config.Guardrail{Name: "secret", Kind: "regex", Action: "block", Patterns: []string{`(?i)top\s+secret`}})
	flag := mustGuard(t, config.Guardrail{Name: "watch", Kind: "regex", Action: "flag", Patterns: []string{`weather`}})
	ck := newChecker(context.Background(), []*guard{block, flag}, nil)
	if out, err := ck.Check([]byte("the weather")); err != nil || string(out) != "the weather" || len(ck.fired) != 1 {
		t.Errorf("flag: %q %v %v", out, err, ck.fired)
	}
	_, err := ck.Check([]byte("this is TOP  secret"))
	var b *Blocked
	if !errors.As(err, &b) || b.Guardrail != "secret" || strings.Contains(err.Error(), "TOP") {
		t.Errorf("block: %v", err)
	}
	cut := mustGuard(t, config.Guardrail{Name: "short", Kind: "max_length", Action: "redact", MaxLength: 5})
	ck = newChecker(context.Background(), []*guard{cut}, nil)
	var got []byte
	for _, s := range []string{"ab", "cdé", "fgh"} {
		out, _ := ck.Feed([]byte(s))
		got = append(got, out...)
	}
	out, _ := ck.Flush()
	if got = append(got, out...); string(got) != "abcdé" {
		t.Errorf("max_length redact: %q", got)
	}
}

func FuzzChecker(f *testing.F) {
	f.Add("mail bob@example.com and 4111 1111 1111 1111, IBAN GB82 WEST 1234 5698 7654 32", uint8(3))
	f.Add("ééé sk-abcdefghijklmnopqrstuvwxyz ééé", uint8(1))
	g := mustGuard(f, config.Guardrail{Name: "pii", Kind: "pii", Action: "redact", Replacement: "#", Window: 16})
	r := mustGuard(f, config.Guardrail{Name: "re", Kind: "regex", Action: "redact", Replacement: "", Window: 16, Patterns: []string{`a+b`}})
	f.Fuzz(func(t *testing.T, text string, size uint8) {
		n := int(size%32) + 1
		whole, err := newChecker(context.Background(), []*guard{g, r}, nil).Check([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		ck := newChecker(context.Background(), []*guard{g, r}, nil)
		var got []byte
		for i := 0; i < len(text); i += n {
			out, err := ck.Feed([]byte(text[i:min(i+n, len(text))]))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out...)
		}
		out, _ := ck.Flush()
		got = append(got, out...)
		if len(text) < 16 && string(got) != string(whole) {
			t.Fatalf("streamed %q, whole %q", got, whole)
		}
		if len(ck.pending) != 0 {
			t.Fatal("text left after flush")
		}
	})
}

// BenchmarkStreamScanner is the cost per chunk of the response stage's
// text scanner with the pii and regex kinds on: 6-byte chunks of prose with
// an e-mail address and a card number now and then.
func BenchmarkStreamScanner(b *testing.B) {
	text := []byte(strings.Repeat("The quick brown fox jumps over the lazy dog; write to carol@example.net or pay with 4111 1111 1111 1111. ", 40))
	for _, bc := range []struct {
		name string
		c    config.Guardrail
	}{
		{"pii", config.Guardrail{Name: "pii", Kind: "pii", Action: "redact"}},
		{"regex", config.Guardrail{Name: "re", Kind: "regex", Action: "redact", Patterns: []string{`(?i)password\s*[:=]\s*\S+`, `\bsecret-[a-z0-9]{8}\b`}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			g := mustGuard(b, bc.c)
			b.ReportAllocs()
			b.SetBytes(6)
			ck := newChecker(context.Background(), []*guard{g}, nil)
			pos := 0
			for b.Loop() {
				if pos+6 > len(text) {
					pos = 0
					ck.Flush()
				}
				if _, err := ck.Feed(text[pos : pos+6]); err != nil {
					b.Fatal(err)
				}
				pos += 6
			}
		})
	}
}
