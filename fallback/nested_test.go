package fallback

import (
	"context"
	"testing"
)

// Nested is true only under a fallback route's call, and NewCall starts a
// call of its own there (a summary written inside it).
func TestNestedAndNewCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if Nested(ctx) || NewCall(ctx) != ctx {
		t.Fatal("a plain context is nested, or NewCall changed it")
	}
	n := context.WithValue(ctx, nestedKey{}, &callState{})
	if !Nested(n) {
		t.Fatal("a fallback route's context is not nested")
	}
	if Nested(NewCall(n)) {
		t.Fatal("NewCall under a fallback route's call is still nested")
	}
}
