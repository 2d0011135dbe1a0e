package pipeline

import "testing"

func TestRequestField(t *testing.T) {
	t.Parallel()
	r := &Request{Body: []byte(`{"messages":[{"role":"user","content":"{\"n\":9}","n":8}],"n":2,"temperature":0,"modalities":["text","audio"],"n":3}`)}
	if got := r.Field(FieldN).Int(); got != 2 {
		t.Fatalf("n = %d, want 2 (top level, first)", got)
	}
	if got := r.Field(FieldTemperature); got.Raw != "0" || got.Num != 0 {
		t.Fatalf("temperature = %q", got.Raw)
	}
	if got := r.Field(FieldModalities).Array(); len(got) != 2 || got[1].Str != "audio" {
		t.Fatalf("modalities = %v", got)
	}
	if r.Field(FieldMaxTokens).Exists() || r.Field(FieldLogprobs).Exists() {
		t.Fatal("an absent field exists")
	}
	// A clone with the same body shares the walk; a new body is walked anew.
	c := r.Clone()
	c.Body = []byte(`{"max_tokens":5,"n":1}`)
	if got := c.Field(FieldMaxTokens).Int(); got != 5 {
		t.Fatalf("max_tokens after a new body = %d", got)
	}
	if got := c.Field(FieldN).Int(); got != 1 {
		t.Fatalf("n after a new body = %d", got)
	}
	if got := r.Field(FieldN).Int(); got != 2 {
		t.Fatalf("the original's n = %d", got)
	}
	if (&Request{}).Field(FieldN).Exists() {
		t.Fatal("a field of no body")
	}
}
