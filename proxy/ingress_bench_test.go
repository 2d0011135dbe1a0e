package proxy

import "testing"

// BenchmarkParseChat is the ingress check of bench's pass-through body.
func BenchmarkParseChat(b *testing.B) {
	body := []byte(`{"model":"chat","temperature":0.7,"messages":[{"role":"system","content":"You are a concise assistant."},{"role":"user","content":"Summarise the plot of Hamlet in two sentences."}]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseChat(body); err != nil {
			b.Fatal(err)
		}
	}
}
