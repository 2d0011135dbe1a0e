package openapi

import (
	"net/http"
	"os"
	"testing"

	"github.com/llmgw/gateway/config"
)

// BenchmarkParsePetstore is the start-up cost of one spec.
func BenchmarkParsePetstore(b *testing.B) {
	doc, err := os.ReadFile("testdata/petstore.yaml")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(doc, config.OpenAPI{Name: "p"}, http.DefaultClient); err != nil {
			b.Fatal(err)
		}
	}
}
