package checks

import (
	"fmt"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// modulePath is the repository's module; an import under it names the
// directory after it.
const modulePath = "github.com/phasepay/phasepay"

// layer is one row of the README's table "Where things are and what you
// may change". rank grows downwards: a package may import only packages of
// a greater rank.
type layer struct {
	name     string
	rank     int
	patterns []string // directories, or "dir/*" for every directory just below dir
}

// layersHeading is the README's section whose table places every package.
const layersHeading = "## Where things are and what you may change"

// readLayers reads the README's table of folders, top row first: the rule
// this test enforces is the one the README states.
func readLayers(t *testing.T) []layer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(b), "\n"+layersHeading+"\n")
	require.True(t, ok, "README.md has no %q section", layersHeading)
	section, _, _ = strings.Cut(section, "\n## ")
	code := regexp.MustCompile("`([^`]+)`")
	var layers []layer
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") || strings.TrimSpace(cells[1]) == "layer" {
			continue
		}
		l := layer{name: strings.TrimSpace(cells[1]), rank: len(layers)}
		for _, m := range code.FindAllStringSubmatch(cells[2], -1) {
			l.patterns = append(l.patterns, m[1])
		}
		require.NotEmpty(t, l.patterns, "layer %q names no package", l.name)
		layers = append(layers, l)
	}
	require.GreaterOrEqual(t, len(layers), 5, "the README's table of folders is not where it was expected")
	return layers
}

// place returns the layer of the package in dir (slash-separated,
// relative to the repository root).
func place(layers []layer, dir string) (layer, bool) {
	for _, l := range layers {
		for _, p := range l.patterns {
			if parent, ok := strings.CutSuffix(p, "/*"); ok {
				if path.Dir(dir) == parent {
					return l, true
				}
			} else if dir == p {
				return l, true
			}
		}
	}
	return layer{}, false
}

// faultsDir holds the faults the chaos build injects: the one package a
// command may import from a layer above, and only under the chaos tag.
const faultsDir = "internal/testutil/faults"

// importEdge is one import of one file of the repository.
type importEdge struct {
	file, from, to string // from and to are directories
	// chaosOnly: the file is compiled only with the chaos build tag.
	chaosOnly bool
}

// checkImports returns what breaks the rule: a package no layer places, an
// import of the own layer or of one above (the chaos build's imports of
// internal/testutil/faults excepted).
func checkImports(layers []layer, dirs []string, edges []importEdge) []string {
	var bad []string
	for _, d := range dirs {
		if _, ok := place(layers, d); !ok {
			bad = append(bad, fmt.Sprintf("%s: no row of the README's table places this package", d))
		}
	}
	for _, e := range edges {
		from, ok1 := place(layers, e.from)
		to, ok2 := place(layers, e.to)
		if !ok1 || !ok2 {
			continue // reported above
		}
		if e.chaosOnly && e.to == faultsDir && strings.HasPrefix(e.from, "cmd/") {
			continue
		}
		if to.rank <= from.rank {
			bad = append(bad, fmt.Sprintf("%s imports %s: %s (%s) may import only layers below its own, and %s is %s",
				e.file, e.to, e.from, from.name, e.to, to.name))
		}
	}
	return bad
}

// chaosOnly reports whether a file's build constraint holds only with the
// chaos tag.
func chaosOnly(f string, src []byte) bool {
	for _, line := range strings.Split(string(src), "\n") {
		if !constraint.IsGoBuild(line) {
			continue
		}
		expr, err := constraint.Parse(line)
		if err != nil {
			return false
		}
		with := expr.Eval(func(tag string) bool { return tag == "chaos" || tag == "linux" || tag == "amd64" })
		without := expr.Eval(func(tag string) bool { return tag == "linux" || tag == "amd64" })
		return with && !without
	}
	return false
}

// repoImports lists every directory holding Go files, and every import of
// a package of this repository by a non-test Go file, whatever its build
// tags.
func repoImports(t *testing.T) (dirs []string, edges []importEdge) {
	t.Helper()
	fset := token.NewFileSet()
	seen := map[string]bool{}
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && p != repoRoot) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, err := filepath.Rel(repoRoot, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		if !seen[dir] {
			seen[dir] = true
			dirs = append(dirs, dir)
		}
		if strings.HasSuffix(p, "_test.go") {
			return nil // tests may import test support from anywhere
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			to, ok := strings.CutPrefix(ip, modulePath+"/")
			if !ok {
				continue
			}
			edges = append(edges, importEdge{file: filepath.ToSlash(filepath.Join(dir, filepath.Base(p))), from: dir, to: to, chaosOnly: chaosOnly(p, src)})
		}
		return nil
	})
	require.NoError(t, err)
	slices.Sort(dirs)
	return dirs, edges
}

// The packages import one another only downwards through the layers the
// README's table draws: no service package imports a tool or test support,
// the engine nothing of the operations, the operations nothing of HTTP.
// Every folder holding Go files, in every module of the repository, is
// placed by a row, so a new package must be given its row there first.
func TestImportsPointDown(t *testing.T) {
	t.Parallel()
	layers := readLayers(t)
	dirs, edges := repoImports(t)
	require.Greater(t, len(edges), 50, "too few imports found: is repoRoot right?")
	require.Empty(t, checkImports(layers, dirs, edges))

	// Every package the table names exists: a stale row is drift too.
	for _, l := range layers {
		for _, p := range l.patterns {
			parent, wildcard := strings.CutSuffix(p, "/*")
			require.True(t, slices.ContainsFunc(dirs, func(d string) bool {
				return d == p || (wildcard && path.Dir(d) == parent)
			}), "the README's layer %q names %s, which holds no Go file", l.name, p)
		}
	}
}

// The check finds imports up and sideways, an unplaced package, and lets
// only the chaos build's faults through.
func TestImportCheckFindsEachBreak(t *testing.T) {
	t.Parallel()
	layers := []layer{
		{name: "support", rank: 0, patterns: []string{faultsDir}},
		{name: "commands", rank: 1, patterns: []string{"cmd/*"}},
		{name: "operations", rank: 2, patterns: []string{"internal/charges"}},
		{name: "engine", rank: 3, patterns: []string{"internal/phases", "internal/events"}},
	}
	dirs := []string{"cmd/api", faultsDir, "internal/charges", "internal/phases", "internal/events", "internal/new"}
	edges := []importEdge{
		{file: "cmd/api/a.go", from: "cmd/api", to: "internal/charges"},                           // down: fine
		{file: "cmd/api/chaos_on.go", from: "cmd/api", to: faultsDir, chaosOnly: true},            // the exception
		{file: "cmd/api/b.go", from: "cmd/api", to: faultsDir},                                    // up, in every build
		{file: "internal/phases/x.go", from: "internal/phases", to: "internal/charges"},           // up
		{file: "internal/phases/y.go", from: "internal/phases", to: "internal/events"},            // sideways
		{file: "internal/charges/z.go", from: "internal/charges", to: faultsDir, chaosOnly: true}, // exception is for cmd only
	}
	bad := checkImports(layers, dirs, edges)
	require.Len(t, bad, 5, "%v", bad)
	require.Contains(t, bad[0], "internal/new: no row")
	for i, file := range []string{"cmd/api/b.go", "internal/phases/x.go", "internal/phases/y.go", "internal/charges/z.go"} {
		require.True(t, strings.HasPrefix(bad[i+1], file+" imports"), bad[i+1])
	}

	require.True(t, chaosOnly("f.go", []byte("//go:build chaos\n\npackage main\n")))
	require.False(t, chaosOnly("f.go", []byte("//go:build !chaos\n\npackage main\n")))
	require.False(t, chaosOnly("f.go", []byte("package main\n")))
}
