package docs_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
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

// citations returns every test command in pitfalls.md, with the "## "
// section it appears in.
func citations(t *testing.T) []citation {
	t.Helper()
	text := readDoc(t, "pitfalls.md")
	var (
		out     []citation
		section string
	)
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimPrefix(line, "## ")
			continue
		}
		for _, m := range testCommand.FindAllStringSubmatch(line, -1) {
			pkg := m[1]
			if rest, ok := strings.CutPrefix(pkg, modulePath+"/"); ok {
				pkg = "./" + rest
			}
			out = append(out, citation{pkg: pkg, test: m[2], section: section})
		}
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
	perSection := map[string]int{}
	for _, c := range citations(t) {
		perSection[c.section]++
	}
	for _, line := range strings.Split(readDoc(t, "pitfalls.md"), "\n") {
		if section, ok := strings.CutPrefix(line, "## "); ok && section != tenSection {
			require.Positive(t, perSection[section], "pitfall %q cites no test", section)
		}
	}
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
