package jsonvalid

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmgw/gateway/internal/modroot"
)

// TestNoDirectValidation keeps every validity check in this package: a
// gjson.Valid or gjson.ValidBytes call anywhere else in the module's code
// (tests aside) is a check without the depth bound, which one request can
// turn into a crash.
func TestNoDirectValidation(t *testing.T) {
	t.Parallel()
	root, err := modroot.Dir()
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "node_modules" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == filepath.Join(root, "jsonvalid") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "gjson" && (sel.Sel.Name == "Valid" || sel.Sel.Name == "ValidBytes") {
				t.Errorf("%s: gjson.%s: use jsonvalid, whose check bounds the nesting", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d files checked: the walk missed the module", checked)
	}
}
