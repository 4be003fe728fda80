package docs_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/api"
)

// api.md and api/openapi.yaml describe one API, in prose and for machines.
// These tests keep them in step with each other and with the code: the
// operations, the problem codes of the one problem table, and the response
// headers the service sets.

// endpointHeading matches an endpoint's heading in api.md: ### `GET /v1/x`.
var endpointHeading = regexp.MustCompile("(?m)^#{2,4} `(GET|POST|PUT|PATCH|DELETE) (/[^`]*)`\\s*$")

func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := api.Load()
	require.NoError(t, err)
	return doc
}

// Every operation of openapi.yaml has its section in api.md, and every
// endpoint section of api.md is an operation of openapi.yaml.
func TestAPIDocCoversEveryOperation(t *testing.T) {
	t.Parallel()
	var documented []string
	for _, m := range endpointHeading.FindAllStringSubmatch(readDoc(t, "api.md"), -1) {
		documented = append(documented, m[1]+" "+m[2])
	}
	var operations []string
	for path, item := range loadOpenAPI(t).Paths.Map() {
		for method := range item.Operations() {
			operations = append(operations, method+" "+path)
		}
	}
	require.NotEmpty(t, operations)
	require.ElementsMatch(t, operations, documented,
		"api.md needs a heading ### `METHOD /path` per operation of api/openapi.yaml, and no other")
}

// problemCodes returns the codes of the problem table in
// internal/problem/problem.go: every constant of type Code.
func problemCodes(t *testing.T) []string {
	t.Helper()
	path := filepath.Join(repoRoot, "internal", "problem", "problem.go")
	file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	var codes []string
	for _, decl := range file.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				require.True(t, ok, "problem codes are string literals")
				code, err := strconv.Unquote(lit.Value)
				require.NoError(t, err)
				codes = append(codes, code)
			}
		}
	}
	require.GreaterOrEqual(t, len(codes), 10, "no problem codes found in %s: is the type still Code?", path)
	return codes
}

// openAPICodes returns the known codes of the Problem schema.
func openAPICodes(t *testing.T) []string {
	t.Helper()
	problem := loadOpenAPI(t).Components.Schemas["Problem"]
	require.NotNil(t, problem, "openapi.yaml has no Problem schema")
	code := problem.Value.Properties["code"]
	require.NotNil(t, code, "the Problem schema has no code")
	require.Empty(t, code.Value.Enum, "Problem.code must be an open set: x-extensible-enum, not enum")
	list, ok := code.Value.Extensions["x-extensible-enum"].([]any)
	require.True(t, ok, "Problem.code lists its known codes in x-extensible-enum")
	var out []string
	for _, v := range list {
		out = append(out, v.(string))
	}
	return out
}

// codeRow matches the first cell of a row of api.md's table of codes.
var codeRow = regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| [0-9]{3} \\|")

// The problem codes the service can send are exactly those api.md's table
// explains and openapi.yaml lists: a code added to the table in Go must be
// documented for clients, and no document lists a code never sent.
func TestEveryProblemCodeIsDocumented(t *testing.T) {
	t.Parallel()
	codes := problemCodes(t)
	require.ElementsMatch(t, codes, openAPICodes(t), "Problem.code's x-extensible-enum in api/openapi.yaml vs internal/problem")
	var rows []string
	for _, m := range codeRow.FindAllStringSubmatch(readDoc(t, "api.md"), -1) {
		rows = append(rows, m[1])
	}
	require.ElementsMatch(t, codes, rows, "the table of codes in docs/api.md vs internal/problem")
}

// setHeader matches a response header set by name in Go source, as
// h.Set("Retry-After", …) or w.Header().Add("Allow", …), and a header name
// constant (RequestIDHeader = "X-Request-Id").
var (
	setHeader   = regexp.MustCompile(`\.(?:Set|Add)\("([A-Z][A-Za-z-]+)"`)
	headerConst = regexp.MustCompile(`Header\s*=\s*"([A-Z][A-Za-z-]+)"`)
)

// responseHeaders returns the header names the service's HTTP layer sets:
// the non-test Go files of internal/httpapi and internal/problem.
func responseHeaders(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, dir := range []string{"internal/httpapi", "internal/problem"} {
		files, err := filepath.Glob(filepath.Join(repoRoot, filepath.FromSlash(dir), "*.go"))
		require.NoError(t, err)
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, re := range []*regexp.Regexp{setHeader, headerConst} {
				for _, m := range re.FindAllStringSubmatch(string(b), -1) {
					seen[m[1]] = true
				}
			}
		}
	}
	out := make([]string, 0, len(seen))
	for h := range seen {
		out = append(out, h)
	}
	slices.Sort(out)
	require.Contains(t, out, "Retry-After", "the header scan finds nothing: did the code's style change?")
	return out
}

// openAPIHeaders returns every header name openapi.yaml declares, in
// components and in responses.
func openAPIHeaders(t *testing.T) map[string]bool {
	t.Helper()
	doc := loadOpenAPI(t)
	out := map[string]bool{}
	for name := range doc.Components.Headers {
		out[name] = true
	}
	add := func(r *openapi3.ResponseRef) {
		if r == nil || r.Value == nil {
			return
		}
		for name := range r.Value.Headers {
			out[name] = true
		}
	}
	for _, r := range doc.Components.Responses {
		add(r)
	}
	for _, item := range doc.Paths.Map() {
		for _, op := range item.Operations() {
			for _, r := range op.Responses.Map() {
				add(r)
			}
		}
	}
	return out
}

// headerRow matches the first cell of a row of api.md's header table.
var headerRow = regexp.MustCompile("(?m)^\\| `([A-Z][A-Za-z-]+)` \\|")

// Every header the service sets on a response is explained in api.md's
// header table and declared in openapi.yaml (Content-Type and
// Content-Length, which OpenAPI describes by the media type, in api.md
// only).
func TestEveryResponseHeaderIsDocumented(t *testing.T) {
	t.Parallel()
	inDoc := map[string]bool{}
	for _, m := range headerRow.FindAllStringSubmatch(readDoc(t, "api.md"), -1) {
		inDoc[m[1]] = true
	}
	inSpec := openAPIHeaders(t)
	for _, h := range responseHeaders(t) {
		require.True(t, inDoc[h], "docs/api.md's header table does not explain %s", h)
		if h == "Content-Type" || h == "Content-Length" {
			continue
		}
		require.True(t, inSpec[h], "api/openapi.yaml declares no header %s", h)
	}
}

// markdownFiles returns every Markdown file of the repository, outside
// .git.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			out = append(out, path)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// The repository stands on its own: no Markdown file links to a file
// outside it (a ../ above the root, an absolute path of some machine, a
// file: URL), so a reader of the repository alone never meets a dead link.
func TestNoLinkLeavesTheRepository(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	files := markdownFiles(t)
	require.GreaterOrEqual(t, len(files), 5)
	for _, f := range files {
		for _, target := range links(readFile(t, f)) {
			if isExternal(target) || strings.HasPrefix(target, "#") {
				continue
			}
			require.False(t, strings.HasPrefix(target, "/") || strings.HasPrefix(target, "file:"),
				"%s: link %q is an absolute local path", f, target)
			path, _, _ := strings.Cut(target, "#")
			abs, err := filepath.Abs(filepath.Join(filepath.Dir(f), filepath.FromSlash(path)))
			require.NoError(t, err)
			rel, err := filepath.Rel(root, abs)
			require.NoError(t, err)
			require.False(t, rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)),
				"%s: link %q leaves the repository", f, target)
		}
	}
}

// outsideRef matches a mention of a file that only exists outside the
// repository: the specification the project was built from, or a path of
// a developer's machine.
var outsideRef = regexp.MustCompile(`CONTRACT\.md|\.\./shared/|/work/|/Users/[a-z]`)

// issueRef matches a citation of this project's issue tracker by number
// ("issue 4"), which says nothing to a reader of the repository alone.
var issueRef = regexp.MustCompile(`(?i)\bissues? #?[0-9]+\b`)

// No file of the repository (docs, code comments, manifests, scripts)
// sends its reader to a file outside it, or to an issue by its number.
func TestNoFileCitesFilesOutsideTheRepository(t *testing.T) {
	t.Parallel()
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "results":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".go", ".md", ".yaml", ".yml", ".sql", ".json", ".sh", "":
		default:
			return nil
		}
		if strings.HasSuffix(path, "apidoc_test.go") { // this file names the patterns
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			require.False(t, outsideRef.MatchString(line), "%s:%d cites a file outside the repository: %s", path, i+1, strings.TrimSpace(line))
			require.False(t, issueRef.MatchString(line), "%s:%d cites an issue by number; say what the thing is: %s", path, i+1, strings.TrimSpace(line))
		}
		return nil
	})
	require.NoError(t, err)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// operatorRow matches an operator command of api.md's table:
// | `bin/api keys list --tenant NAME` |.
var operatorRow = regexp.MustCompile("(?m)^\\| `bin/api ([a-z]+) ([a-z]+)")

// Every operator command api.md lists is a command of bin/api: both words
// name entries of cmd/api's command tables.
func TestOperatorCommandsInAPIDocExist(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join(repoRoot, "cmd", "api", "*.go"))
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		for _, m := range regexp.MustCompile(`name:\s*"([a-z]+)"`).FindAllStringSubmatch(readFile(t, f), -1) {
			names[m[1]] = true
		}
	}
	rows := operatorRow.FindAllStringSubmatch(readDoc(t, "api.md"), -1)
	require.NotEmpty(t, rows, "api.md lists no operator commands")
	for _, m := range rows {
		require.True(t, names[m[1]] && names[m[2]], "api.md lists `bin/api %s %s`, which cmd/api does not have", m[1], m[2])
	}
}
