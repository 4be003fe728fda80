package checks

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository root as seen from this package's directory.
const repoRoot = ".."

// failNowMethods are the testing.TB methods that end the test's goroutine
// (runtime.Goexit). Called from any other goroutine they end that one
// instead, and the test goes on as if the assertion had passed.
var failNowMethods = map[string]bool{
	"FailNow": true, "Fatal": true, "Fatalf": true, "SkipNow": true, "Skip": true, "Skipf": true,
}

// failNowOffTheTestGoroutine reports, in the Go source src, every call
// that can FailNow inside a function that runs on a goroutine of its own:
// the body of a `go func(){…}()` or of a `x.Go(func(){…})` (sync.WaitGroup,
// errgroup), require.* or t.Fatal and the like; and a `go f(t, …)` that
// hands the test itself to another goroutine. testifylint's go-require
// sees only `go` statements; this sees both.
func failNowOffTheTestGoroutine(fset *token.FileSet, name string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var found []string
	report := func(n ast.Node, what string) {
		found = append(found, fmt.Sprintf("%s: %s off the test's goroutine", fset.Position(n.Pos()), what))
	}
	ast.Inspect(f, func(n ast.Node) bool {
		var body *ast.BlockStmt
		switch n := n.(type) {
		case *ast.GoStmt:
			if lit, ok := n.Call.Fun.(*ast.FuncLit); ok {
				body = lit.Body
				break
			}
			for _, arg := range n.Call.Args {
				if id, ok := arg.(*ast.Ident); ok && (id.Name == "t" || id.Name == "tb") {
					report(n, "go with the test's "+id.Name)
				}
			}
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Go" && len(n.Args) == 1 {
				if lit, ok := n.Args[0].(*ast.FuncLit); ok {
					body = lit.Body
				}
			}
		}
		if body == nil {
			return true
		}
		ast.Inspect(body, func(m ast.Node) bool {
			call, ok := m.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok {
				switch {
				case x.Name == "require":
					report(call, "require."+sel.Sel.Name)
				case (x.Name == "t" || x.Name == "tb") && failNowMethods[sel.Sel.Name]:
					report(call, x.Name+"."+sel.Sel.Name)
				}
			}
			return true
		})
		return false // nested goroutines were seen in the walk above
	})
	return found, nil
}

// No test calls require, t.Fatal, t.FailNow or t.Skip from a goroutine of
// its own, where they would end that goroutine and not the test: the
// failure would be reported, but the test would go on (and could pass its
// later checks on half-done work). Such a goroutine collects its errors
// for the test's goroutine to assert, or uses assert.
func TestNoFailNowOffTheTestGoroutine(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	var (
		found []string
		files int
	)
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && name != "." && name != "..") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		files++
		f, err := failNowOffTheTestGoroutine(fset, path, nil)
		found = append(found, f...)
		return err
	})
	require.NoError(t, err)
	require.Greater(t, files, 100, "the walk found too few test files: is repoRoot right?")
	require.Empty(t, found)
}

// The check finds what it looks for, and nothing else.
func TestFailNowCheckFindsEachForm(t *testing.T) {
	t.Parallel()
	src := `package x
func TestX(t *testing.T) {
	go func() { require.NoError(t, err) }()      // found
	wg.Go(func() { t.Fatal("x") })               // found
	g.Go(func() error { require.True(t, ok); return nil }) // found
	go helper(t)                                 // found
	go func() { assert.NoError(t, err) }()       // assert: fine
	wg.Go(func() { errs[i] = work() })           // fine
	require.NoError(t, err)                      // on the test's goroutine: fine
	t.Run("sub", func(t *testing.T) { require.True(t, ok) }) // a subtest's own goroutine: fine
}`
	found, err := failNowOffTheTestGoroutine(token.NewFileSet(), "x_test.go", src)
	require.NoError(t, err)
	require.Len(t, found, 4, "%v", found)
	for i, want := range []string{":3:", ":4:", ":5:", ":6:"} {
		require.Contains(t, found[i], want)
	}
}
