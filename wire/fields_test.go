package wire

import (
	"testing"

	"github.com/tidwall/gjson"
)

func TestTopFields(t *testing.T) {
	t.Parallel()
	keys := []string{"temperature", "n", "max_tokens"}
	for _, tc := range []struct {
		name, doc string
		want      [3]string // Raw of each
	}{
		{name: "all", doc: `{"messages":[{"n":5}],"n":2,"temperature":0.5,"max_tokens":9}`, want: [3]string{"0.5", "2", "9"}},
		{name: "none", doc: `{"messages":[{"temperature":1}]}`},
		{name: "first of a repeat", doc: `{"n":1,"n":3}`, want: [3]string{"", "1", ""}},
		{name: "escaped key", doc: `{"\u006e":4}`, want: [3]string{"", "4", ""}},
		{name: "not an object", doc: `[1,2]`},
		{name: "empty", doc: ``},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out [3]gjson.Result
			out[0] = gjson.Parse("7") // cleared first
			TopFields([]byte(tc.doc), keys, out[:])
			for i := range keys {
				if out[i].Raw != tc.want[i] {
					t.Errorf("%s = %q, want %q", keys[i], out[i].Raw, tc.want[i])
				}
			}
		})
	}
}
