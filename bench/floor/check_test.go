package main

import (
	"strings"
	"testing"
)

func chunk(content string) string {
	return `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"` +
		content + `"},"finish_reason":null}],"usage":null}` + "\n\n"
}

const usageEvent = `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}` + "\n\n"

// checkAll feeds body to a checker in pieces cut at the given offsets and
// returns its verdict and the tokens it metered.
func checkAll(body string, cuts ...int) (bool, int64) {
	before := tokens.Load()
	var c eventChecker
	at := 0
	for _, cut := range append(cuts, len(body)) {
		if cut < at || cut > len(body) {
			continue
		}
		if !c.check([]byte(body[at:cut])) {
			return false, tokens.Load() - before
		}
		at = cut
	}
	return true, tokens.Load() - before
}

// TestEventChecker: every event's data is checked as JSON and its usage
// metered, whether an event comes whole or split across reads; an event
// that is not JSON fails the stream.
func TestEventChecker(t *testing.T) {
	good := chunk("Hel") + chunk("lo") + usageEvent + "data: [DONE]\n\n"
	for _, cuts := range [][]int{nil, {10}, {len(chunk("Hel")) + 3, len(good) - 4}, {1, 2, 3, 200, 201}} {
		ok, n := checkAll(good, cuts...)
		if !ok || n != 10 {
			t.Errorf("cut at %v: ok %v, %d tokens; want true, 10", cuts, ok, n)
		}
	}
	bad := chunk("a") + `data: {"id":"c","choices":[` + "\n\n" + "data: [DONE]\n\n"
	if ok, _ := checkAll(bad, 30); ok {
		t.Error("a stream with an event that is not JSON passed")
	}
	if ok, _ := checkAll("data: {\"a\":\""+strings.Repeat("x", maxEventBytes)+"\"}", 4096); ok {
		t.Error("an event longer than maxEventBytes that never ends passed")
	}
}

// FuzzEventChecker: where the reads cut a stream never changes the verdict
// or what is metered, and no input panics.
func FuzzEventChecker(f *testing.F) {
	f.Add(chunk("x")+usageEvent+"data: [DONE]\n\n", 5, 80)
	f.Add("data: {\"usage\":{\"prompt_tokens\":1}}\n\ndata: nope\n\n", 3, 20)
	f.Add(": comment\n\ndata:[DONE]\n\n", 0, 1)
	f.Fuzz(func(t *testing.T, body string, a, b int) {
		if strings.Count(body, "\n\n") > 64 {
			return
		}
		wholeOK, wholeN := checkAll(body)
		a, b = clampCut(a, len(body)), clampCut(b, len(body))
		if a > b {
			a, b = b, a
		}
		ok, n := checkAll(body, a, b)
		if ok != wholeOK || (ok && n != wholeN) {
			t.Fatalf("cut at %d, %d: ok %v, %d tokens; whole: %v, %d", a, b, ok, n, wholeOK, wholeN)
		}
	})
}

func clampCut(v, n int) int {
	if v < 0 {
		v = -v
	}
	if n == 0 {
		return 0
	}
	return v % (n + 1)
}

func BenchmarkEventChecker(b *testing.B) {
	body := chunk("")
	for range 19 {
		body += chunk("abcd")
	}
	body += usageEvent + "data: [DONE]\n\n"
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		var c eventChecker
		if !c.check([]byte(body[:len(body)/2])) || !c.check([]byte(body[len(body)/2:])) {
			b.Fatal("check")
		}
	}
}
