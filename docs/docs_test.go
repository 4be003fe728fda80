package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// repoRoot is the repository root as seen from this package's directory,
// where `go test` runs the test binary.
const repoRoot = ".."

// testCommand matches a test citation in pitfalls.md, exactly as a reader
// would paste it: go test ./path/ -run '^TestName$', or, for the client
// module (a module of its own, which ./path does not reach from the root),
// go test github.com/phasepay/phasepay/client -run '^TestName$'.
var testCommand = regexp.MustCompile(`go test (\./[^\s]*|` + regexp.QuoteMeta(modulePath) + `/[^\s]*) -run '\^(Test\w+)\$'`)

// modulePath is the repository's module path; a package cited by import
// path lives in the directory after it.
const modulePath = "github.com/phasepay/phasepay"

type citation struct {
	pkg, test string
	section   string
}

// citations returns every test command in pitfalls.md, with the entry
// ("### " heading) or the section ("## ") it appears in.
func citations(t *testing.T) []citation {
	t.Helper()
	var (
		out     []citation
		section string
	)
	for _, line := range strings.Split(readDoc(t, "pitfalls.md"), "\n") {
		if heading, ok := cutHeading(line); ok {
			section = heading
			continue
		}
		out = append(out, commandsIn(line, section)...)
	}
	return out
}

// cutHeading returns the text of a "## " or "### " heading.
func cutHeading(line string) (string, bool) {
	if h, ok := strings.CutPrefix(line, "### "); ok {
		return h, true
	}
	return strings.CutPrefix(line, "## ")
}

// commandsIn returns the test commands of a text, each with where it is.
func commandsIn(text, where string) []citation {
	var out []citation
	for _, m := range testCommand.FindAllStringSubmatch(text, -1) {
		pkg := m[1]
		if rest, ok := strings.CutPrefix(pkg, modulePath+"/"); ok {
			pkg = "./" + rest
		}
		out = append(out, citation{pkg: pkg, test: m[2], section: where})
	}
	return out
}

// testFuncs returns the names of the top-level Test functions declared in
// the *_test.go files of dir.
func testFuncs(t *testing.T, dir string) map[string]bool {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	require.NoError(t, err)
	names := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err, f)
		for _, decl := range file.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
				names[fn.Name.Name] = true
			}
		}
	}
	return names
}

// Every test pitfalls.md tells the reader to run exists in the package the
// command names, so `go test -run` runs it rather than silently nothing.
func TestPitfallTestsExist(t *testing.T) {
	t.Parallel()
	cites := citations(t)
	require.GreaterOrEqual(t, len(cites), 12, "pitfalls.md cites too few tests: is the command format still go test ./pkg/ -run '^TestName$'?")
	requireTestsExist(t, cites)
}

// Every test command anywhere else exists too: in the package docs that
// hold the hardening notes pitfalls.md leaves out, in comments, in the
// other docs and the scripts.
func TestEveryTestCommandExists(t *testing.T) {
	t.Parallel()
	var cites []citation
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || name == "node_modules" || (strings.HasPrefix(name, ".") && path != repoRoot) {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case path == filepath.Join(repoRoot, "docs", "pitfalls.md"):
			return nil // TestPitfallTestsExist's
		case strings.HasSuffix(path, "_test.go") && filepath.Dir(path) == filepath.Join(repoRoot, "docs"):
			return nil // these tests, which spell the form out
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".sh", ".sql", ".yaml", ".yml":
		case "":
			if d.Name() != "Makefile" && filepath.Dir(path) != filepath.Join(repoRoot, "scripts") {
				return nil
			}
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		cites = append(cites, commandsIn(string(b), path)...)
		return nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(cites), 20, "too few test commands found outside pitfalls.md: does the pattern still match?")
	requireTestsExist(t, cites)
}

// requireTestsExist fails unless every cited test is a Test function of
// the package its command names.
func requireTestsExist(t *testing.T, cites []citation) {
	t.Helper()
	funcs := map[string]map[string]bool{}
	for _, c := range cites {
		dir := filepath.Join(repoRoot, filepath.FromSlash(c.pkg))
		info, err := os.Stat(dir)
		require.NoError(t, err, "%s: package %s does not exist", c.section, c.pkg)
		require.True(t, info.IsDir(), "%s: %s is not a package directory", c.section, c.pkg)
		if funcs[c.pkg] == nil {
			funcs[c.pkg] = testFuncs(t, dir)
		}
		require.True(t, funcs[c.pkg][c.test], "%s: %s has no func %s in its *_test.go files", c.section, c.pkg, c.test)
	}
}

// Every pitfall names at least one test that proves it.
func TestEveryPitfallCitesATest(t *testing.T) {
	t.Parallel()
	perEntry := map[string]int{}
	for _, c := range citations(t) {
		perEntry[c.section]++
	}
	entries := 0
	for _, line := range strings.Split(readDoc(t, "pitfalls.md"), "\n") {
		if entry, ok := strings.CutPrefix(line, "### "); ok {
			require.Positive(t, perEntry[entry], "pitfall %q cites no test", entry)
			entries++
		}
	}
	require.Greater(t, entries, 10)
}

// mdLink matches an inline markdown link's target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link in docs/*.md, the README and deploy/README.md points
// to a file or directory that exists and, when it names a heading of a
// markdown file, to a heading that exists there (GitHub's anchor rules).
func TestRelativeLinksResolve(t *testing.T) {
	t.Parallel()
	docs := prose(t)
	checked := 0
	for _, doc := range docs {
		for _, target := range links(readDoc(t, doc)) {
			if isExternal(target) {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			resolved := doc // a bare "#anchor" is in the same file
			if path != "" {
				resolved = filepath.Join(filepath.Dir(doc), filepath.FromSlash(path))
				_, err := os.Stat(resolved)
				require.NoError(t, err, "%s: link %q points to nothing", doc, target)
			}
			if anchor != "" && strings.HasSuffix(resolved, ".md") {
				require.Contains(t, anchors(t, resolved), anchor, "%s: link %q names no heading of %s", doc, target, resolved)
			}
			checked++
		}
	}
	require.Positive(t, checked)
}

// The runbook keeps the anchors the alerts link to.
func TestRunbookAnchors(t *testing.T) {
	t.Parallel()
	have := anchors(t, "operations.md")
	want := []string{"stuck-keys", "psp-outage", "a-request-needs-attention", "partition-not-created-ahead", "database-failover", "lease-lost", "reaper-absent"}
	// And whatever deploy/'s alert rules link to, if they are there.
	if rules, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "prometheus", "alerts.yaml")); err == nil {
		for _, m := range regexp.MustCompile(`docs/operations\.md#([A-Za-z0-9_-]+)`).FindAllStringSubmatch(string(rules), -1) {
			want = append(want, m[1])
		}
	}
	for _, a := range want {
		require.Contains(t, have, a, "operations.md has no heading for #%s", a)
	}
}

func readDoc(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(b)
}

// links returns the inline link targets of a markdown text, outside fenced
// code blocks and code spans.
func links(text string) []string {
	var out []string
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(stripCodeSpans(line), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// stripCodeSpans removes `code` spans, keeping a link whose text is one:
// [`file.go`](../file.go) stays a link.
func stripCodeSpans(line string) string {
	var b strings.Builder
	in := false
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '`':
			in = !in
			if !in {
				b.WriteString("x") // the span's stand-in, so "[`x`](y)" still matches
			}
		case !in:
			b.WriteByte(line[i])
		}
	}
	return b.String()
}

func isExternal(target string) bool {
	for _, scheme := range []string{"http://", "https://", "mailto:"} {
		if strings.HasPrefix(target, scheme) {
			return true
		}
	}
	return false
}

// anchors returns the GitHub anchors of a markdown file's headings:
// lower case, punctuation other than '-' and '_' dropped, spaces as '-',
// and -1, -2, … appended to repeats.
func anchors(t *testing.T, file string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := slugify(heading)
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func slugify(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r > 127 && !isPunctuation(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isPunctuation reports the non-ASCII punctuation GitHub drops from anchors
// that these docs use.
func isPunctuation(r rune) bool {
	return strings.ContainsRune("…—–’“”", r)
}
