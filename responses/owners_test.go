package responses

import (
	"context"
	"strings"
	"testing"
)

// A tenant's output items are its own and no other tenant's, and an
// item's record is not a response's (nor the reverse): each kind is
// looked up as what it names.
func TestOwnerItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := &Owners{KV: NewMemoryKV(1 << 20)}
	if err := o.RecordItems(ctx, "a", []string{"rs_1", "msg_1", "", strings.Repeat("x", maxProviderID+1)}); err != nil {
		t.Fatal(err)
	}
	if err := o.Record(ctx, "a", "resp_1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tenant  string
		ids     []string
		missing string
		ok      bool
	}{
		{"a", []string{"msg_1", "rs_1"}, "", true},
		{"b", []string{"msg_1"}, "msg_1", false},
		{"a", []string{"msg_1", "msg_2"}, "msg_2", false},
		{"a", []string{"resp_1"}, "resp_1", false},
		{"a", []string{strings.Repeat("x", maxProviderID+1)}, strings.Repeat("x", maxProviderID+1), false},
		{"a", make([]string, MaxItems+1), "", false},
	} {
		missing, ok, err := o.OwnsItems(ctx, tc.tenant, tc.ids)
		if err != nil || ok != tc.ok || missing != tc.missing {
			t.Errorf("%s %.40q: %q %v %v, want %q %v", tc.tenant, tc.ids, missing, ok, err, tc.missing, tc.ok)
		}
	}
	if owns, _ := o.Owns(ctx, "a", "msg_1"); owns {
		t.Error("an item's id passes as a response's")
	}
}
