package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// leafCommands returns every command that runs, by its path after "api"
// (e.g. "requests list").
func leafCommands() map[string]*command {
	out := map[string]*command{}
	var walk func(prefix string, cs []*command)
	walk = func(prefix string, cs []*command) {
		for _, c := range cs {
			if c.sub != nil {
				walk(prefix+c.name+" ", c.sub)
				continue
			}
			out[prefix+c.name] = c
		}
	}
	walk("", commands)
	return out
}

// flagsOf returns the flags a command declares.
func flagsOf(c *command) []string {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.flags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

var longFlag = regexp.MustCompile(`--([a-z][a-z-]*)`)

// Each command's synopsis names exactly the flags it declares, so that
// `-h`, the docs that copy the synopsis and the command agree.
func TestSynopsisNamesEveryFlag(t *testing.T) {
	t.Parallel()
	for path, c := range leafCommands() {
		var inSynopsis []string
		for _, m := range longFlag.FindAllStringSubmatch(c.args, -1) {
			inSynopsis = append(inSynopsis, m[1])
		}
		require.ElementsMatch(t, flagsOf(c), inSynopsis, "api %s: synopsis %q", path, c.args)
	}
}

// The operator commands docs/api.md lists are the commands of bin/api
// (every one, with its synopsis as `api COMMAND -h` prints it), and every
// bin/api command line in the docs uses only flags its command has.
func TestDocsNameEveryCommand(t *testing.T) {
	t.Parallel()
	root := filepath.Join("..", "..")
	leaves := leafCommands()

	apiDoc := readRepoFile(t, root, "docs/api.md")
	row := regexp.MustCompile("(?m)^\\| `(bin/api [^`]+)` \\|")
	var rows []string
	for _, m := range row.FindAllStringSubmatch(apiDoc, -1) {
		rows = append(rows, strings.ReplaceAll(m[1], `\|`, "|"))
	}
	var want []string
	for path, c := range leaves {
		if path == "serve" || path == "migrate" {
			continue // api.md's table is of the operator's commands, "besides serve and migrate"
		}
		want = append(want, strings.TrimSpace("bin/api "+path+" "+c.args))
	}
	require.ElementsMatch(t, want, rows, "docs/api.md's operator commands against cmd/api's")
	for _, path := range []string{"serve", "migrate"} {
		require.Contains(t, apiDoc, "`"+path+"`", "docs/api.md names bin/api %s", path)
	}

	// Every command line in the prose: `bin/api keys list --tenant acme
	// --json` uses flags keys list has.
	files := []string{"README.md", "deploy/README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, filepath.ToSlash(rel))
	}
	paths := make([]string, 0, len(leaves))
	for p := range leaves {
		paths = append(paths, p)
	}
	// Longest first, so that "keys list" wins over a shorter prefix.
	slices.SortFunc(paths, func(a, b string) int { return len(b) - len(a) })
	line := regexp.MustCompile(`bin/api ([a-z]+(?: [a-z]+)?)([^` + "`" + `\n|]*)`)
	checked := 0
	for _, f := range files {
		for _, m := range line.FindAllStringSubmatch(readRepoFile(t, root, f), -1) {
			i := slices.IndexFunc(paths, func(p string) bool { return m[1] == p || strings.HasPrefix(m[1], p+" ") })
			if i < 0 {
				// "bin/api requests list|show|retry|resolve" and the like
				// name a group; a word after bin/api must be a command.
				group, _, _ := strings.Cut(m[1], " ")
				require.True(t, slices.ContainsFunc(paths, func(p string) bool { return strings.HasPrefix(p, group+" ") || p == group }),
					"%s: `bin/api %s` names no command", f, m[1])
				continue
			}
			flags := flagsOf(leaves[paths[i]])
			for _, fm := range longFlag.FindAllStringSubmatch(m[2], -1) {
				require.Contains(t, flags, fm[1], "%s: `bin/api %s%s`: %s has no --%s", f, m[1], m[2], paths[i], fm[1])
				checked++
			}
		}
	}
	require.Greater(t, checked, 10, "too few flags checked: does the pattern still match the docs?")
}

func readRepoFile(t *testing.T, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	require.NoError(t, err)
	return string(b)
}
