package openapi

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/llmgw/gateway/config"
)

// realWorldSpec returns Asana's public OpenAPI 3.0 description (403 KB, 152
// operations), read from the test specs that ship inside the libopenapi
// module this package already depends on, so that no third-party file is
// copied into this repository. The test skips when the module's files are
// not on disk (go mod download fetches them; .ci/run does).
func realWorldSpec(tb testing.TB) []byte { return moduleSpec(tb, "asana.yaml") }

// moduleSpec reads one of the test specs inside the libopenapi module.
func moduleSpec(tb testing.TB, file string) []byte {
	tb.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/pb33f/libopenapi").Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		tb.Skipf("the libopenapi module is not downloaded (%v)", err)
	}
	doc, err := os.ReadFile(filepath.Join(dir, "test_specs", file))
	if err != nil {
		tb.Skipf("%s not in the libopenapi module: %v", file, err)
	}
	return doc
}

// toolNameRule is what OpenAI and Anthropic accept as a function name.
var toolNameRule = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// A large real-world spec loads whole: one tool per operation, every name a
// valid function name, every parameters schema self-contained JSON (no
// $ref left) of an object, the base URL from the spec's servers.
func TestParseRealWorldSpec(t *testing.T) {
	t.Parallel()
	doc := realWorldSpec(t)
	start := time.Now()
	ops, err := Parse(doc, config.OpenAPI{Name: "asana", Prefix: "asana_"}, http.DefaultClient)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Count(string(doc), "operationId:")
	t.Logf("asana.yaml: %d KB, %d operations, %d tools in %v", len(doc)>>10, want, len(ops), took)
	if len(ops) != want {
		t.Fatalf("%d tools for %d operations", len(ops), want)
	}
	seen := map[string]bool{}
	for _, o := range ops {
		name := o.Tool.Name
		if !toolNameRule.MatchString(name) || seen[name] || !strings.HasPrefix(name, "asana_") {
			t.Errorf("tool name %q (duplicate: %v)", name, seen[name])
		}
		seen[name] = true
		p := o.Tool.Parameters
		if !gjson.Valid(p) || gjson.Get(p, "type").Str != "object" || strings.Contains(p, `"$ref"`) {
			t.Errorf("%s: parameters %.200s", name, p)
		}
		if o.base == nil || o.base.Host != "app.asana.com" {
			t.Errorf("%s: base %v", name, o.base)
		}
	}
	task := byName(ops)["asana_getTask"]
	if task == nil || task.method != "GET" || !gjson.Get(task.Tool.Parameters, "properties.task_gid").Exists() {
		t.Fatalf("getTask: %+v", task)
	}
}

// The official Petstore v3 description (JSON) loads into one tool per
// operation, its $refs inlined.
func TestParseOfficialPetstore(t *testing.T) {
	t.Parallel()
	doc := moduleSpec(t, "petstorev3.json")
	ops, err := Parse(doc, config.OpenAPI{Name: "pets", BaseURL: "http://pets.local/api/v3"}, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Count(string(doc), `"operationId"`); len(ops) != want || want < 15 {
		t.Fatalf("%d tools for %d operations", len(ops), want)
	}
	add := byName(ops)["addPet"]
	if add == nil || add.method != "POST" || strings.Contains(add.Tool.Parameters, "$ref") ||
		gjson.Get(add.Tool.Parameters, "properties.body.properties.name.type").Str != "string" {
		t.Fatalf("addPet: %+v", add)
	}
}

// BenchmarkParseRealWorldSpec: loading Asana's spec (152 operations).
func BenchmarkParseRealWorldSpec(b *testing.B) {
	doc := realWorldSpec(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(doc, config.OpenAPI{Name: "asana"}, http.DefaultClient); err != nil {
			b.Fatal(err)
		}
	}
}
