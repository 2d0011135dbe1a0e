package config

import (
	"errors"
	"strings"
	"testing"
)

// positionConfig has an optional provider without a key (dropped with its
// model by defaults, so later models move up a place after defaults), the
// provider shorthand, inline deployments, fallbacks and nested tables.
const positionConfig = `# line 1
[[providers]]
name = "gone"
kind = "openai"
base_url = "https://gone.example/v1"
api_key = "${SURELY_UNSET_VAR_43}"
optional = true

[[providers]]
name = "p"
kind = "mock"

[[models]]          # line 13: models[0], dropped with "gone"
name = "a"
provider = "gone"

[[models]]          # line 17: models[1]
name = "b"
provider = "p"
fallbacks = ["a", "nope"]

[[models]]          # line 22: models[2]
name = "c"
provider = "typo"

[[models]]          # line 26: models[3]
name = "d"
deployments = [
  { provider = "p" },
  { provider = "gone" },
  { provider = "missing", weight = -1 },
]

[[mcp_servers]]     # line 34
name = "m"
url = "http://127.0.0.1:1/mcp"
deny = ["[bad"]

[redis]             # line 39
db = 1
`

// Validation errors name the key as the file writes it (models[2].provider
// for the shorthand, the file's indexes even when defaults dropped an
// element before it) and the line where it is defined.
func TestValidationErrorsNameTheFilesKeyAndLine(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(positionConfig))
	if err == nil {
		t.Fatal("accepted")
	}
	want := []string{
		`line 20: models[1].fallbacks[1]: unknown model "nope"`,
		`line 24: models[2].provider: unknown provider "typo"`,
		`line 31: models[3].deployments[2].provider: unknown provider "missing"`,
		`line 31: models[3].deployments[2].weight: must be positive`,
		`line 37: mcp_servers[0].deny[0]: bad pattern "[bad"`,
		`line 39: redis.addr: required`,
	}
	got := strings.Split(err.Error(), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", err, strings.Join(want, "\n"))
	}
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Key != "models[1].fallbacks[1]" || ke.Line != 20 {
		t.Fatalf("errors.As: %+v", ke)
	}
}

func TestKeyLines(t *testing.T) {
	t.Parallel()
	src := "a = 1\n[t]\nb.c = [1,\n  2]\n[[arr]]\nx = 1\n[[arr.sub]]\ny = 2\n[[arr]]\n[[arr.sub]]\n[[arr.sub]]\nz = { q = 3 }\n\"quoted key\" = [[4], {r = 5}]\n"
	lines := keyLines([]byte(src))
	cases := []struct {
		key  string
		line int
	}{
		{"a", 1}, {"t", 2}, {"t.b.c", 3}, {"t.b.c[1]", 4}, {"arr[0]", 5}, {"arr[0].x", 6},
		{"arr[0].sub[0]", 7}, {"arr[0].sub[0].y", 8}, {"arr[1]", 9}, {"arr[1].sub[0]", 10},
		{"arr[1].sub[1]", 11}, {"arr[1].sub[1].z.q", 12}, {"arr[1].sub[1].quoted key[1].r", 13},
	}
	for _, c := range cases {
		if got := lines[c.key]; got != c.line {
			t.Errorf("%s: line %d, want %d (all: %v)", c.key, got, c.line, lines)
		}
	}
	if l := lineOfKey(lines, "arr[1].sub[1].missing[3].x"); l != 11 {
		t.Errorf("an undefined key falls back to its table's line: got %d", l)
	}
}
