package checks

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sleepsAllowed is how many explained sleeps the service's tests may hold.
// River's hold 14 in 39 k lines.
const sleepsAllowed = 8

// sleepReason is how the line above a time.Sleep in a test begins.
const sleepReason = "// sleep: "

// sleepsIn reports, in the Go source src, every time.Sleep call without a
// "// sleep: <reason>" comment alone on the line above it, and counts the
// explained ones.
func sleepsIn(fset *token.FileSet, name string, src []byte) (unexplained []string, explained int, err error) {
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, 0, err
	}
	timeNames := map[string]bool{} // what the file calls package time
	for _, imp := range f.Imports {
		if path, _ := strconv.Unquote(imp.Path.Value); path == "time" {
			name := "time"
			if imp.Name != nil {
				name = imp.Name.Name
			}
			timeNames[name] = true
		}
	}
	lines := strings.Split(string(src), "\n")
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Sleep" {
			return true
		}
		if x, ok := sel.X.(*ast.Ident); !ok || !timeNames[x.Name] {
			return true
		}
		pos := fset.Position(call.Pos())
		if pos.Line >= 2 {
			above := strings.TrimSpace(lines[pos.Line-2])
			if reason, ok := strings.CutPrefix(above, sleepReason); ok && strings.TrimSpace(reason) != "" {
				explained++
				return true
			}
		}
		unexplained = append(unexplained, fmt.Sprintf("%s: time.Sleep without a %q comment on the line above", pos, strings.TrimSpace(sleepReason)+" <reason>"))
		return true
	})
	return unexplained, explained, nil
}

// No test under internal/ or cmd/ sleeps without saying why on the line
// above, and there are at most sleepsAllowed such sleeps. A test waits on
// a test signal (internal/testsignal), on a condition polled with a
// deadline (testsignal.WaitFor), or on a clock it pins; a sleep is for
// what none of these can reach, such as a subprocess's own clock.
func TestSleepsInTestsAreExplained(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	var (
		found     []string
		explained int
		files     int
	)
	serviceTestFiles(t, func(path string, src []byte) error {
		files++
		bad, n, err := sleepsIn(fset, path, src)
		found = append(found, bad...)
		explained += n
		return err
	})
	require.Greater(t, files, 100, "the walk found too few test files: is repoRoot right?")
	require.Empty(t, found)
	require.LessOrEqual(t, explained, sleepsAllowed,
		"explained sleeps in the tests of internal/ and cmd/: wait on a signal, a polled condition or a pinned clock instead")
}

// The check refuses a bad example and accepts an explained sleep.
func TestSleepCheckFindsUnexplainedSleeps(t *testing.T) {
	t.Parallel()
	src := `package x

import (
	"time"
	clock "time"
)

func TestX(t *testing.T) {
	time.Sleep(time.Second) // found: a reason after it is not above it

	// sleep: the mock's TTL runs on its own clock.
	time.Sleep(time.Second) // explained

	// sleep: the comment must be directly above.

	time.Sleep(time.Second) // found
	// sleep:
	time.Sleep(time.Second) // found: no reason
	// Waits out the lease.
	clock.Sleep(time.Second) // found: an unexplained sleep by another name
	go func() { time.Sleep(time.Second) }() // found
	x.Sleep(time.Second) // not time's: fine
}`
	found, explained, err := sleepsIn(token.NewFileSet(), "x_test.go", []byte(src))
	require.NoError(t, err)
	require.Equal(t, 1, explained)
	require.Len(t, found, 5, "%v", found)
	for i, want := range []string{":9:", ":16:", ":18:", ":20:", ":21:"} {
		require.Contains(t, found[i], want)
	}
}
