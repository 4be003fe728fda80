package deploy_test

// The image: deploy/Dockerfile and its .dockerignore, against the code.

import (
	"encoding/json"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ---------------------------------------------------------------------------
// Dockerfile.

type dockerInstr struct {
	cmd  string // upper case
	args string
}

type dockerStage struct {
	from, name string
	instrs     []dockerInstr
}

func (s dockerStage) all(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

func parseDockerfile(t *testing.T) []dockerStage {
	t.Helper()
	data, err := os.ReadFile(dockerfilePath)
	require.NoError(t, err)
	var logical []string
	var cur strings.Builder
	for _, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if body, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(trimmed)
		logical = append(logical, cur.String())
		cur.Reset()
	}
	require.Zero(t, cur.Len(), "Dockerfile ends in a continuation")

	var stages []dockerStage
	for _, l := range logical {
		cmd, args, _ := strings.Cut(l, " ")
		cmd = strings.ToUpper(cmd)
		args = strings.TrimSpace(args)
		if cmd == "FROM" {
			var fields []string
			for _, f := range strings.Fields(args) {
				if !strings.HasPrefix(f, "--") {
					fields = append(fields, f)
				}
			}
			require.NotEmpty(t, fields, "FROM without image")
			st := dockerStage{from: fields[0]}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			stages = append(stages, st)
			continue
		}
		require.NotEmpty(t, stages, "%s before FROM", cmd)
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, dockerInstr{cmd, args})
	}
	return stages
}

// execForm parses the JSON form of ENTRYPOINT/CMD. The runtime image has no
// shell, so the shell form would not run at all.
func execForm(t *testing.T, what, args string) []string {
	t.Helper()
	var v []string
	require.NoError(t, json.Unmarshal([]byte(args), &v), "%s must be in exec (JSON) form: the image has no shell", what)
	return v
}

type imageDefaults struct {
	entrypoint, cmd []string
	binaries        []string // installed in binDir
	exposed         []int
	uid             int64
}

func dockerImage(t *testing.T) imageDefaults {
	t.Helper()
	stages := parseDockerfile(t)
	require.GreaterOrEqual(t, len(stages), 2, "multi-stage Dockerfile")
	final := stages[len(stages)-1]
	var img imageDefaults
	if eps := final.all("ENTRYPOINT"); assert.Len(t, eps, 1, "one ENTRYPOINT") {
		img.entrypoint = execForm(t, "ENTRYPOINT", eps[0])
	}
	if cmds := final.all("CMD"); assert.Len(t, cmds, 1, "one CMD") {
		img.cmd = execForm(t, "CMD", cmds[0])
	}
	for _, e := range final.all("EXPOSE") {
		for _, p := range strings.Fields(e) {
			n, err := strconv.Atoi(strings.TrimSuffix(p, "/tcp"))
			if assert.NoError(t, err, "EXPOSE %s", p) {
				img.exposed = append(img.exposed, n)
			}
		}
	}
	if users := final.all("USER"); assert.Len(t, users, 1, "one USER in the runtime stage") {
		uid, _, _ := strings.Cut(users[0], ":")
		n, err := strconv.ParseInt(uid, 10, 64)
		if assert.NoError(t, err, "USER must be numeric (runAsNonRoot cannot check a name): %q", users[0]) {
			img.uid = n
		}
	}
	for _, c := range final.all("COPY") {
		fields := strings.Fields(c)
		if len(fields) < 3 || !slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, "--from=") }) {
			continue
		}
		dst := fields[len(fields)-1]
		for _, src := range fields[:len(fields)-1] {
			if strings.HasPrefix(src, "--") {
				continue
			}
			switch {
			case strings.HasSuffix(dst, "/") && dst == binDir:
				img.binaries = append(img.binaries, path.Base(src))
			case path.Dir(dst)+"/" == binDir:
				img.binaries = append(img.binaries, path.Base(dst))
			}
		}
	}
	slices.Sort(img.binaries)
	return img
}

func TestDockerfile(t *testing.T) {
	facts := codeFactsT(t)
	stages := parseDockerfile(t)
	require.GreaterOrEqual(t, len(stages), 2, "multi-stage Dockerfile")

	build, final := stages[0], stages[len(stages)-1]
	assert.Regexp(t, `^golang:1\.26(\.\d+)?$`, build.from, "build stage: golang:1.26, a tag without digest")
	require.NotEmpty(t, build.name, "build stage is named (FROM ... AS build)")

	// The go build of the build stage names exactly the Makefile's targets.
	var builds []string
	for _, run := range build.all("RUN") {
		if regexp.MustCompile(`\bgo build\b`).MatchString(run) {
			builds = append(builds, run)
		}
	}
	require.Len(t, builds, 1, "one go build in the build stage")
	gb := builds[0]
	assert.Contains(t, gb, "CGO_ENABLED=0", "static binaries")
	assert.Contains(t, gb, "-trimpath")
	assert.Contains(t, gb, `-ldflags="-s -w"`)
	assert.Regexp(t, `-o /out/(\s|$)`, gb, "binaries into /out")
	targets := regexp.MustCompile(`\./cmd/[A-Za-z0-9_.\-/]+`).FindAllString(gb, -1)
	var want []string
	for _, b := range facts.binaries {
		want = append(want, "./cmd/"+b)
	}
	slices.Sort(targets)
	slices.Sort(want)
	assert.Equal(t, want, targets, "Dockerfile go build targets vs Makefile BINARIES")
	for _, b := range facts.binaries {
		assert.DirExists(t, filepath.Join(repoRoot, "cmd", b))
	}

	// Runtime: distroless static, non-root, no shell: no RUN, exec-form entrypoint.
	assert.Equal(t, "gcr.io/distroless/static-debian12:nonroot", final.from)
	assert.Empty(t, final.all("RUN"), "the runtime image has no shell to RUN with")
	for _, c := range final.all("COPY") {
		if from, ok := strings.CutPrefix(strings.Fields(c)[0], "--from="); ok {
			assert.Equal(t, build.name, from, "COPY --from the build stage")
			assert.Regexp(t, `(^|\s)/out/`, c, "copies the build's /out")
		}
	}
	img := dockerImage(t)
	wantBins := slices.Clone(facts.binaries)
	slices.Sort(wantBins)
	assert.Equal(t, wantBins, img.binaries, "binaries installed in "+binDir)
	assert.Equal(t, int64(65532), img.uid, "USER 65532 (distroless nonroot)")
	assert.Equal(t, []string{binDir + "api"}, img.entrypoint)
	assert.Equal(t, []string{"serve"}, img.cmd)

	// EXPOSE lists exactly the ports the manifests make the binaries listen on.
	ports := map[int]bool{}
	for _, c := range allAppContainers(t) {
		if p, ok := c.listenPort(); ok {
			ports[p] = true
		}
		if p, ok := c.metricsPort(); ok {
			ports[p] = true
		}
	}
	exposed := slices.Clone(img.exposed)
	slices.Sort(exposed)
	assert.Equal(t, slices.Sorted(maps.Keys(ports)), exposed, "EXPOSE vs the listen ports of the manifests")
}

// ---------------------------------------------------------------------------
// Dockerfile.dockerignore.

// dockerignoreRe turns one .dockerignore pattern into a regexp: * and ? stay
// within a path element, ** spans elements.
func dockerignoreRe(pattern string) *regexp.Regexp {
	p := strings.TrimPrefix(path.Clean(strings.TrimPrefix(pattern, "/")), "./")
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		switch {
		case strings.HasPrefix(p[i:], "**/"):
			b.WriteString("(?:.*/)?")
			i += 2
		case strings.HasPrefix(p[i:], "**"):
			b.WriteString(".*")
			i++
		case p[i] == '*':
			b.WriteString("[^/]*")
		case p[i] == '?':
			b.WriteString("[^/]")
		default:
			b.WriteString(regexp.QuoteMeta(p[i : i+1]))
		}
	}
	// A pattern that names a directory excludes what is inside.
	b.WriteString("(?:/.*)?$")
	return regexp.MustCompile(b.String())
}

func dockerignored(patterns []string, rel string) bool {
	excluded := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		if dockerignoreRe(strings.TrimPrefix(p, "!")).MatchString(rel) {
			excluded = !neg
		}
	}
	return excluded
}

func TestDockerignore(t *testing.T) {
	data, err := os.ReadFile(dockerignorePath)
	require.NoError(t, err)
	var patterns []string
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	require.NotEmpty(t, patterns)

	// The matcher itself.
	for rel, want := range map[string]bool{
		".git/config": true, "cmd/api/main_test.go": true, "bin/api": true, "deploy/Dockerfile": true,
		"cmd/api/main.go": false, "go.mod": false, "migrations/00001_tenants.sql": false,
	} {
		assert.Equal(t, want, dockerignored(patterns, rel), "dockerignore of %s", rel)
	}

	// Nothing the three binaries compile or embed is left out of the context.
	facts := codeFactsT(t)
	needed := []string{"go.mod", "go.sum", "client/go.mod", "client/go.sum"}
	for _, files := range facts.files {
		needed = append(needed, files...)
	}
	for _, rel := range needed {
		assert.False(t, dockerignored(patterns, rel), "%s excludes %s, which the build needs", dockerignorePath, rel)
	}

	// The service's module builds alone: not the workspace, which would
	// bring the tools' module (and its browser driver) into the build.
	for _, rel := range []string{"go.work", "tools/go.mod"} {
		assert.True(t, dockerignored(patterns, rel), "%s leaves %s in the build context", dockerignorePath, rel)
	}
}
