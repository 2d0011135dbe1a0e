package pipeline

import (
	"strings"
	"testing"

	"github.com/llmgw/gateway/jsonvalid"
)

// A body refused for its nesting is named so, not called invalid JSON (a
// probe saw depth 1000 valid JSON refused as "not valid JSON").
func TestRequestObjectNamesTheDepth(t *testing.T) {
	t.Parallel()
	deep := `{"a":` + strings.Repeat("[", jsonvalid.MaxDepth+1) + strings.Repeat("]", jsonvalid.MaxDepth+1) + `}`
	for body, want := range map[string]string{
		deep:          "more than 1000 levels deep",
		`{"a":`:       "not valid JSON",
		`{"a":[[1]]}`: "",
	} {
		_, err := RequestObject([]byte(body))
		switch {
		case want == "" && err != nil:
			t.Errorf("%.20s: %v", body, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%.20s: %v, want %q", body, err, want)
		}
	}
}
