package docs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fencedAfter returns the first fenced block of text that contains marker.
func fencedAfter(t *testing.T, text, marker string) string {
	t.Helper()
	parts := strings.Split(text, "```")
	for i := 1; i < len(parts); i += 2 {
		if strings.Contains(parts[i], marker) {
			_, body, _ := strings.Cut(parts[i], "\n") // the info string
			return body
		}
	}
	require.Failf(t, "no such block", "api.md has no fenced block with %q", marker)
	return ""
}

// appMain is a program of someone else's that uses the client.
const appMain = `package main

import (
	"fmt"

	"github.com/phasepay/phasepay/client"
)

func main() {
	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:1", APIKey: "sk_test"})
	fmt.Println(c != nil, err)
}
`

// The two ways api.md gives to use the Go client from a checkout, a
// replace in go.mod and a workspace, work as written: a module of its own,
// beside a checkout at ../phasepay, builds a program that imports the
// client, with exactly the lines the doc shows.
func TestClientFromACheckout(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err)
	doc := readDoc(t, "api.md")
	replace := fencedAfter(t, doc, "replace github.com/phasepay/phasepay/client")
	work := strings.TrimSpace(fencedAfter(t, doc, "go work init"))

	root, err := filepath.Abs(repoRoot)
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Symlink(root, filepath.Join(dir, "phasepay")))
	run := func(in string, args ...string) {
		t.Helper()
		cmd := exec.Command(goBin, args...)
		cmd.Dir = in
		// Outside this repository's module and workspace, on the Go
		// installed, as someone else's module would build.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
		if args[0] == "work" || fileExists(filepath.Join(in, "go.work")) {
			cmd.Env = append(cmd.Env, "GOWORK="+filepath.Join(in, "go.work"))
		}
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s in %s:\n%s", strings.Join(args, " "), in, out)
	}
	newApp := func(name, gomod string) string {
		t.Helper()
		app := filepath.Join(dir, name)
		require.NoError(t, os.Mkdir(app, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(app, "go.mod"), []byte(gomod), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(app, "main.go"), []byte(appMain), 0o644))
		return app
	}

	app := newApp("withreplace", "module example.com/app\n\ngo 1.24\n\n"+replace)
	run(app, "mod", "tidy")
	run(app, "build", "./...")

	args, ok := strings.CutPrefix(work, "go ")
	require.True(t, ok, "the workspace command is a go command: %q", work)
	app = newApp("withworkspace", "module example.com/app\n\ngo 1.24\n")
	run(app, strings.Fields(args)...)
	run(app, "build", "./...")
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
