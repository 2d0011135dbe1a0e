package modroot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDir(t *testing.T) {
	d, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d, "go.mod")); err != nil {
		t.Fatalf("Dir() = %s: %v", d, err)
	}
	if want, _ := filepath.Abs("../.."); d != want {
		t.Fatalf("Dir() = %s, want %s", d, want)
	}
}
