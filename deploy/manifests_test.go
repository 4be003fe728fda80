package deploy_test

// Checks of the deployment manifests (Dockerfile, docker-compose.yml, the
// Kubernetes base in k8s/, the nginx config in proxy/) against the code.
//
// No container engine or cluster runs these files here, so what is checked is
// everything that can go wrong between them and the code without one:
//
//   - the Dockerfile's build stage builds exactly the ./cmd/... targets of the
//     Makefile's BINARIES, statically, into a distroless non-root image whose
//     EXPOSE lists the ports the manifests listen on;
//   - Dockerfile.dockerignore excludes no file the three binaries compile or
//     embed;
//   - every application container (compose service or k8s container) runs the
//     one image, a binary of that image that exists as ./cmd/<name>, with a
//     subcommand cmd/api knows, and sets only environment variables that the
//     binary's code reads (found by scanning the Go source, so a typo fails;
//     OTEL_* must be a standard OpenTelemetry SDK variable);
//   - every variable of the contract is set somewhere, in compose and in k8s;
//   - listen addresses are 0.0.0.0:PORT and PORT is the declared container
//     port, the probe port, the scrape port, the proxy's upstream port and the
//     port in the URLs other services use (PSP_URL, the OTLP endpoint);
//   - probes use /readyz and /healthz, which internal/httpapi routes;
//   - grace periods exceed cmd/api's ShutdownTimeout (read from serve.go);
//   - the HPA, the PDB and the Services select the pods they are meant to.
//
// docker compose config, kubectl kustomize and a real build are the remaining
// checks; TestKustomizeBuild runs kubectl kustomize when kubectl is on PATH.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"maps"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

const (
	// appImage is the only image of our own that the manifests may run.
	appImage = "ghcr.io/phasepay/phasepay:latest"
	// binDir is where the Dockerfile installs the binaries.
	binDir = "/usr/local/bin/"

	repoRoot            = ".."
	composePath         = "docker-compose.yml"
	dockerfilePath      = "Dockerfile"
	dockerignorePath    = "Dockerfile.dockerignore"
	k8sDir              = "k8s"
	kustomizationPath   = "k8s/kustomization.yaml"
	nginxConfPath       = "proxy/nginx.conf"
	promConfigPath      = "prometheus/prometheus.yml"
	collectorConfigPath = "otel-collector.yaml"
)

// contractEnv are the variables the README's Configuration table names (besides
// OTEL_*); each must be set somewhere in compose and in k8s.
var contractEnv = []string{"DATABASE_URL", "API_ADDR", "PSP_URL", "MOCKPSP_ADDR", "LEASE", "REAPER_INTERVAL", "RETENTION"}

// listenEnv names, per binary, the variable holding the address it listens on
// (for the reaper, its /metrics listener).
var listenEnv = map[string]string{"api": "API_ADDR", "reaper": "REAPER_METRICS_ADDR", "mockpsp": "MOCKPSP_ADDR"}

// metricsEnv names, per binary, the variable of a /metrics listener other
// than listenEnv's: the api serves /metrics on METRICS_ADDR when it is set,
// and then no longer on its API port.
var metricsEnv = map[string]string{"api": "METRICS_ADDR"}

// thirdPartyImages are the images compose may run besides ours.
var thirdPartyImages = []string{"postgres", "nginx", "otel/opentelemetry-collector-contrib", "prom/prometheus", "grafana/grafana"}

// otelEnvRe matches the OpenTelemetry SDK's standard variables (the ones
// the Go SDK, autoexport and autoprop read), so that a typo in an OTEL_*
// name fails too.
var otelEnvRe = regexp.MustCompile(`^OTEL_(` +
	`SDK_DISABLED|SERVICE_NAME|RESOURCE_ATTRIBUTES|LOG_LEVEL|PROPAGATORS|` +
	`TRACES_SAMPLER|TRACES_SAMPLER_ARG|(TRACES|METRICS|LOGS)_EXPORTER|` +
	`METRIC_EXPORT_INTERVAL|METRIC_EXPORT_TIMEOUT|METRICS_EXEMPLAR_FILTER|` +
	`BSP_(SCHEDULE_DELAY|EXPORT_TIMEOUT|MAX_QUEUE_SIZE|MAX_EXPORT_BATCH_SIZE)|` +
	`EXPORTER_OTLP_((TRACES|METRICS|LOGS)_)?(ENDPOINT|PROTOCOL|HEADERS|TIMEOUT|COMPRESSION|INSECURE|CERTIFICATE|CLIENT_KEY|CLIENT_CERTIFICATE)|` +
	`EXPORTER_PROMETHEUS_(HOST|PORT)|` +
	`(ATTRIBUTE|SPAN_ATTRIBUTE|SPAN_EVENT|SPAN_LINK|EVENT_ATTRIBUTE|LINK_ATTRIBUTE)_COUNT_LIMIT|` +
	`(ATTRIBUTE|SPAN_ATTRIBUTE)_VALUE_LENGTH_LIMIT` +
	`)$`)

// errReporter is the part of *testing.T the checkers use, so that their own
// tests can collect the errors instead of failing.
type errReporter interface {
	Errorf(format string, args ...any)
}

type collected []string

func (c *collected) Errorf(format string, args ...any) { *c = append(*c, fmt.Sprintf(format, args...)) }

// ---------------------------------------------------------------------------
// The code side: what the binaries are, read, route and wait for.

type codeFacts struct {
	binaries        []string                   // Makefile BINARIES, as cmd names
	env             map[string]map[string]bool // binary -> variables its code reads
	files           map[string][]string        // binary -> repo-relative files it compiles or embeds
	apiCommands     []string                   // subcommands of cmd/api
	apiRoutes       map[string]bool            // paths internal/httpapi routes
	shutdownTimeout time.Duration              // cmd/api ShutdownTimeout
}

var loadCodeFacts = sync.OnceValues(func() (*codeFacts, error) {
	f := &codeFacts{env: map[string]map[string]bool{}, files: map[string][]string{}, apiRoutes: map[string]bool{}}

	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		return nil, err
	}
	if f.binaries, err = makeBinaries(string(mk)); err != nil {
		return nil, err
	}

	for _, bin := range f.binaries {
		pkgs, err := goListDeps("./cmd/" + bin)
		if err != nil {
			return nil, err
		}
		names := map[string]bool{}
		for _, p := range pkgs {
			for _, gf := range p.GoFiles {
				rel := path.Join(p.Rel, gf)
				f.files[bin] = append(f.files[bin], rel)
				// Only the project's own configuration: cmd/ and internal/.
				if !strings.HasPrefix(rel, "cmd/") && !strings.HasPrefix(rel, "internal/") {
					continue
				}
				found, err := envNamesInGoFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
				if err != nil {
					return nil, err
				}
				for _, n := range found {
					names[n] = true
				}
			}
			for _, ef := range p.EmbedFiles {
				f.files[bin] = append(f.files[bin], path.Join(p.Rel, ef))
			}
		}
		f.env[bin] = names
	}

	mainGo, err := os.ReadFile(filepath.Join(repoRoot, "cmd/api/main.go"))
	if err != nil {
		return nil, err
	}
	// The commands of main.go's table (name: "serve"), or of a switch.
	for _, m := range regexp.MustCompile(`(?m)^\s*(?:case |name:\s*)"([a-z]+)"`).FindAllStringSubmatch(string(mainGo), -1) {
		f.apiCommands = append(f.apiCommands, m[1])
	}

	routeRe := regexp.MustCompile(`\.(?:Get|Head|Handle|HandleFunc|Method|MethodFunc)\(\s*(?:http\.Method\w+\s*,\s*|"[A-Z]+"\s*,\s*)?"(/[^"]*)"`)
	goFiles, err := filepath.Glob(filepath.Join(repoRoot, "internal/httpapi/*.go"))
	if err != nil {
		return nil, err
	}
	for _, gf := range goFiles {
		if strings.HasSuffix(gf, "_test.go") {
			continue
		}
		src, err := os.ReadFile(gf)
		if err != nil {
			return nil, err
		}
		for _, m := range routeRe.FindAllStringSubmatch(string(src), -1) {
			f.apiRoutes[m[1]] = true
		}
	}

	serveGo, err := os.ReadFile(filepath.Join(repoRoot, "cmd/api/serve.go"))
	if err != nil {
		return nil, err
	}
	m := regexp.MustCompile(`(?m)^const ShutdownTimeout\s*=\s*(\d+)\s*\*\s*time\.(Second|Minute)\b`).FindStringSubmatch(string(serveGo))
	if m == nil {
		return nil, errors.New("cmd/api/serve.go: no `const ShutdownTimeout = N * time.Second`")
	}
	n, _ := strconv.Atoi(m[1])
	f.shutdownTimeout = time.Duration(n) * time.Second
	if m[2] == "Minute" {
		f.shutdownTimeout = time.Duration(n) * time.Minute
	}
	return f, nil
})

func codeFactsT(t *testing.T) *codeFacts {
	t.Helper()
	f, err := loadCodeFacts()
	require.NoError(t, err)
	return f
}

// makeBinaries reads `BINARIES := bin/a bin/b` and checks that the pattern
// rule builds bin/X from ./cmd/X.
func makeBinaries(makefile string) ([]string, error) {
	m := regexp.MustCompile(`(?m)^BINARIES\s*:?=\s*(.+)$`).FindStringSubmatch(makefile)
	if m == nil {
		return nil, errors.New("Makefile: no BINARIES := line")
	}
	if !regexp.MustCompile(`(?m)^bin/%:.*\n\t.*\bgo\b.*\bbuild\b.*\./cmd/\$\*`).MatchString(makefile) &&
		!regexp.MustCompile(`(?m)^bin/%:.*\n\t.*\$\(GO\) build\b.*\./cmd/\$\*`).MatchString(makefile) {
		return nil, errors.New("Makefile: the bin/% rule no longer builds ./cmd/$*")
	}
	var bins []string
	for _, b := range strings.Fields(m[1]) {
		name, ok := strings.CutPrefix(b, "bin/")
		if !ok {
			return nil, fmt.Errorf("Makefile: BINARIES entry %q is not bin/NAME", b)
		}
		bins = append(bins, name)
	}
	return bins, nil
}

type listedPackage struct {
	Dir        string
	Rel        string // Dir relative to the repository root, slash-separated
	GoFiles    []string
	EmbedFiles []string
	Module     *struct{ Main bool }
}

// goListDeps returns the main module's packages a command depends on, with
// the files the default build (no tags, as in the Dockerfile) compiles.
func goListDeps(target string) ([]listedPackage, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return nil, fmt.Errorf("go not on PATH: %w", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-json=Dir,GoFiles,EmbedFiles,Module", target)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // as in the Dockerfile
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w\n%s", target, err, stderr.String())
	}
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		return nil, err
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if p.Module == nil || !p.Module.Main {
			continue
		}
		rel, err := filepath.Rel(root, p.Dir)
		if err != nil {
			return nil, err
		}
		p.Rel = filepath.ToSlash(rel)
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		return nil, fmt.Errorf("go list -deps %s: no package of the main module", target)
	}
	return pkgs, nil
}

var (
	envNameRe = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	// In the fallback below, only names with an underscore, so that plain
	// upper-case words are not taken for variables.
	envNameLooseRe = regexp.MustCompile(`^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$`)
)

// envNamesInGoFile returns the environment variable names a Go file reads:
// string literals passed to getenv(...), os.Getenv, os.LookupEnv or any
// envconfig.* function. When a function calls one of those with a
// non-literal name (getenv(rate.name)), every NAME_LIKE_THIS literal of that
// function counts, so that names listed in a table are found too.
func envNamesInGoFile(file string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	return envNamesInAST(f), nil
}

func envNamesInAST(f *ast.File) []string {
	var names []string
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		dynamic := false
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || !isEnvLookup(call) {
				return true
			}
			literal := false
			for _, a := range call.Args {
				if s, ok := goStringLit(a); ok && envNameRe.MatchString(s) {
					names = append(names, s)
					literal = true
				}
			}
			dynamic = dynamic || !literal
			return true
		})
		if dynamic {
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if e, ok := n.(ast.Expr); ok {
					if s, ok := goStringLit(e); ok && envNameLooseRe.MatchString(s) {
						names = append(names, s)
					}
				}
				return true
			})
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func isEnvLookup(call *ast.CallExpr) bool {
	switch fn := call.Fun.(type) {
	case *ast.Ident:
		return strings.EqualFold(fn.Name, "getenv") || strings.EqualFold(fn.Name, "lookupenv")
	case *ast.SelectorExpr:
		if x, ok := fn.X.(*ast.Ident); ok && x.Name == "envconfig" {
			return true
		}
		return strings.EqualFold(fn.Sel.Name, "getenv") || strings.EqualFold(fn.Sel.Name, "lookupenv")
	}
	return false
}

func goStringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

func TestEnvScanner(t *testing.T) {
	src := `package p
import ("os"; "x/envconfig")
func a(getenv func(string) string) {
	_ = envconfig.String(getenv, "DATABASE_URL", "postgres://x")
	_ = getenv("PSP_URL")
	_ = os.Getenv("OTEL_TRACES_EXPORTER")
	_ = fmt.Sprint("NOT_READ")
}
func b(getenv func(string) string) {
	for _, n := range []string{"MOCKPSP_ERROR_RATE", "MOCKPSP_DROP_RATE"} { _ = getenv(n) }
}`
	f, err := parser.ParseFile(token.NewFileSet(), "x.go", src, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"DATABASE_URL", "MOCKPSP_DROP_RATE", "MOCKPSP_ERROR_RATE", "OTEL_TRACES_EXPORTER", "PSP_URL"}, envNamesInAST(f))

	// On the real code: every contract variable is found, per binary.
	facts := codeFactsT(t)
	assert.Subset(t, facts.binaries, []string{"api", "reaper", "mockpsp"}, "Makefile BINARIES")
	for bin, want := range map[string][]string{
		"api":     {"DATABASE_URL", "API_ADDR", "PSP_URL", "MOCKPSP_ADDR", "LEASE"},
		"reaper":  {"DATABASE_URL", "PSP_URL", "LEASE", "REAPER_INTERVAL", "RETENTION", "REAPER_METRICS_ADDR"},
		"mockpsp": {"MOCKPSP_ADDR", "MOCKPSP_ERROR_RATE", "MOCKPSP_DROP_RATE", "MOCKPSP_LATENCY"},
	} {
		for _, name := range want {
			assert.True(t, facts.env[bin][name], "scanner did not find %s read by %s (found %v)", name, bin, slices.Sorted(maps.Keys(facts.env[bin])))
		}
	}
	assert.False(t, facts.env["mockpsp"]["DATABASE_URL"], "mockpsp does not read DATABASE_URL")

	// The container checker rejects a typo, a variable of another binary and
	// a non-standard OTEL_ name.
	for _, bad := range []map[string]string{
		{"DATABSE_URL": "postgres://x", "API_ADDR": "0.0.0.0:8080"},
		{"REAPER_METRICS_ADDR": "0.0.0.0:9091", "API_ADDR": "0.0.0.0:8080"},
		{"OTEL_EXPORTER_OTPL_ENDPOINT": "http://c:4318", "API_ADDR": "0.0.0.0:8080"},
		{"API_ADDR": "127.0.0.1:8080"},
	} {
		var errs collected
		c := appContainer{where: "synthetic", image: appImage, entrypoint: []string{binDir + "api"}, args: []string{"serve"}, env: bad, ports: map[string]int{"http": 8080}}
		checkAppContainer(&errs, facts, c)
		assert.NotEmpty(t, errs, "checker accepted env %v", bad)
	}
	var errs collected
	good := appContainer{where: "synthetic", image: appImage, entrypoint: []string{binDir + "api"}, args: []string{"serve"},
		env: map[string]string{"API_ADDR": "0.0.0.0:8080", "OTEL_SERVICE_NAME": "x"}, ports: map[string]int{"http": 8080}}
	checkAppContainer(&errs, facts, good)
	assert.Empty(t, errs)
}

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
	needed := []string{"go.mod", "go.sum"}
	for _, files := range facts.files {
		needed = append(needed, files...)
	}
	for _, rel := range needed {
		assert.False(t, dockerignored(patterns, rel), "%s excludes %s, which the build needs", dockerignorePath, rel)
	}
}

// ---------------------------------------------------------------------------
// Application containers, from compose and from k8s.

type appContainer struct {
	where      string
	system     string // "compose" or "k8s"
	image      string
	entrypoint []string // effective, after the image's defaults
	args       []string
	env        map[string]string // value "" when it comes from a reference
	ports      map[string]int    // declared container ports by name (compose: by number)
	replicas   int
	// shared names the variables that come from a ConfigMap or Secret
	// through envFrom, which several binaries share; the others are set for
	// this container alone and must be read by its binary.
	shared map[string]bool
}

func (c appContainer) binary() string {
	if len(c.entrypoint) == 0 {
		return ""
	}
	return path.Base(c.entrypoint[0])
}

// serves reports whether the container is a long-running server (not `api
// migrate` or `api keys`).
func (c appContainer) serves() bool {
	switch c.binary() {
	case "api":
		return len(c.args) == 0 || c.args[0] == "serve"
	case "reaper", "mockpsp":
		return true
	}
	return false
}

// listenPort is the port of the binary's listen variable, if set.
func (c appContainer) listenPort() (int, bool) {
	return c.envPort(listenEnv[c.binary()])
}

// metricsPort is the port the binary serves /metrics on: its metricsEnv
// variable's if set, else its listen port.
func (c appContainer) metricsPort() (int, bool) {
	if p, ok := c.envPort(metricsEnv[c.binary()]); ok {
		return p, true
	}
	return c.listenPort()
}

// envPort is the port of the address in the variable name, if set.
func (c appContainer) envPort(name string) (int, bool) {
	if !c.serves() || name == "" {
		return 0, false
	}
	v, ok := c.env[name]
	if !ok {
		return 0, false
	}
	_, p, err := net.SplitHostPort(v)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(p)
	return n, err == nil
}

var (
	allAppContainersOnce sync.Once
	allAppContainersVal  []appContainer
)

func allAppContainers(t *testing.T) []appContainer {
	t.Helper()
	allAppContainersOnce.Do(func() {
		allAppContainersVal = append(composeAppContainers(t, loadCompose(t)), k8sAppContainers(t, loadK8s(t))...)
	})
	require.NotEmpty(t, allAppContainersVal)
	return allAppContainersVal
}

// checkAppContainer reports what is wrong with one application container.
func checkAppContainer(t errReporter, facts *codeFacts, c appContainer) {
	if c.image != appImage {
		t.Errorf("%s: image %q, want %q", c.where, c.image, appImage)
	}
	bin := c.binary()
	if !slices.Contains(facts.binaries, bin) {
		t.Errorf("%s: runs %v, not one of the binaries %v", c.where, c.entrypoint, facts.binaries)
		return
	}
	if len(c.entrypoint) != 1 || c.entrypoint[0] != binDir+bin {
		t.Errorf("%s: entrypoint %v, want [%s%s]", c.where, c.entrypoint, binDir, bin)
	}
	if _, err := os.Stat(filepath.Join(repoRoot, "cmd", bin)); err != nil {
		t.Errorf("%s: ./cmd/%s does not exist", c.where, bin)
	}
	switch bin {
	case "api":
		if len(c.args) == 0 || !slices.Contains(facts.apiCommands, c.args[0]) {
			t.Errorf("%s: api %v: not a subcommand of cmd/api %v", c.where, c.args, facts.apiCommands)
		}
	default:
		if len(c.args) > 0 {
			t.Errorf("%s: %s takes no arguments, got %v", c.where, bin, c.args)
		}
	}

	for name, value := range c.env {
		switch {
		case strings.HasPrefix(name, "OTEL_"):
			if !otelEnvRe.MatchString(name) {
				t.Errorf("%s: %s is not a standard OpenTelemetry variable (typo?)", c.where, name)
			}
		case c.shared[name]:
			// From a ConfigMap or Secret shared by several binaries
			// (envFrom): some binary must read it.
			if !slices.ContainsFunc(facts.binaries, func(b string) bool { return facts.env[b][name] }) {
				t.Errorf("%s: %s (shared through envFrom) is read by no binary (typo?)", c.where, name)
			}
		case !facts.env[bin][name]:
			t.Errorf("%s: %s is not read by %s (typo, or set on the wrong binary?); it reads %v",
				c.where, name, bin, slices.Sorted(maps.Keys(facts.env[bin])))
		}
		switch name {
		case "LEASE", "REAPER_INTERVAL", "RETENTION":
			if value != "" {
				if d, err := time.ParseDuration(value); err != nil || d <= 0 {
					t.Errorf("%s: %s=%q is not a positive Go duration", c.where, name, value)
				}
			}
		case "MOCKPSP_ERROR_RATE", "MOCKPSP_DROP_RATE":
			if value != "" {
				if f, err := strconv.ParseFloat(value, 64); err != nil || f < 0 || f > 1 {
					t.Errorf("%s: %s=%q is not a number in 0..1", c.where, name, value)
				}
			}
		case "PSP_URL", "OTEL_EXPORTER_OTLP_ENDPOINT":
			if value != "" {
				if u, err := url.Parse(value); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					t.Errorf("%s: %s=%q is not an http(s) URL", c.where, name, value)
				}
			}
		}
	}

	// A server listens on 0.0.0.0:PORT (the default 127.0.0.1 is unreachable
	// from outside the container) and declares PORT.
	if c.serves() {
		name := listenEnv[bin]
		addr, ok := c.env[name]
		if !ok {
			t.Errorf("%s: %s is not set; %s would listen on 127.0.0.1 only", c.where, name, bin)
			return
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Errorf("%s: %s=%q is not host:port", c.where, name, addr)
			return
		}
		if host != "0.0.0.0" && host != "" && host != "::" {
			t.Errorf("%s: %s=%q: listen on 0.0.0.0 to be reachable from outside the container", c.where, name, addr)
		}
		p, _ := strconv.Atoi(port)
		if c.system == "k8s" && !slices.Contains(slices.Collect(maps.Values(c.ports)), p) {
			t.Errorf("%s: listens on %d (%s) but declares container ports %v", c.where, p, name, c.ports)
		}
		mp, _ := c.metricsPort()
		if c.system == "k8s" && !slices.Contains(slices.Collect(maps.Values(c.ports)), mp) {
			t.Errorf("%s: serves /metrics on %d (%s) but declares container ports %v", c.where, mp, metricsEnv[bin], c.ports)
		}
		for pn, declared := range c.ports {
			if declared != p && declared != mp {
				t.Errorf("%s: declares port %s=%d, but %s listens on %d (and /metrics on %d)", c.where, pn, declared, bin, p, mp)
			}
		}
	}
}

func TestAppContainers(t *testing.T) {
	facts := codeFactsT(t)
	containers := allAppContainers(t)
	bySystem := map[string][]appContainer{}
	for _, c := range containers {
		checkAppContainer(t, facts, c)
		bySystem[c.system] = append(bySystem[c.system], c)
	}

	for _, system := range []string{"compose", "k8s"} {
		cs := bySystem[system]
		require.NotEmpty(t, cs, "%s app containers", system)

		// Every process exports its traces to the collector under its own
		// service name.
		for _, c := range cs {
			assert.Equal(t, "otlp", c.env["OTEL_TRACES_EXPORTER"], "%s: OTEL_TRACES_EXPORTER", c.where)
			assert.NotEmpty(t, c.env["OTEL_EXPORTER_OTLP_ENDPOINT"], "%s: OTEL_EXPORTER_OTLP_ENDPOINT", c.where)
			assert.Regexp(t, `^phasepay-[a-z]+$`, c.env["OTEL_SERVICE_NAME"], "%s: OTEL_SERVICE_NAME", c.where)
		}

		// Every contract variable is set somewhere.
		set := map[string]bool{}
		running := map[string]int{}
		for _, c := range cs {
			for name := range c.env {
				set[name] = true
			}
			if c.serves() {
				running[c.binary()] += c.replicas
			}
		}
		for _, name := range contractEnv {
			assert.True(t, set[name], "%s: no app container sets %s", system, name)
		}
		assert.GreaterOrEqual(t, running["api"], 2, "%s: two api replicas", system)
		assert.GreaterOrEqual(t, running["reaper"], 2, "%s: two reapers", system)
		assert.GreaterOrEqual(t, running["mockpsp"], 1, "%s: the mock PSP", system)

		// The API and the reapers agree on the lease, and the reaper's
		// RETENTION exceeds it (the reaper refuses to start otherwise).
		leases := map[string]bool{}
		for _, c := range cs {
			if v := c.env["LEASE"]; v != "" {
				leases[v] = true
			}
		}
		assert.Len(t, leases, 1, "%s: one LEASE for every process: %v", system, slices.Sorted(maps.Keys(leases)))
		for _, c := range cs {
			if c.binary() != "reaper" {
				continue
			}
			lease, err1 := time.ParseDuration(c.env["LEASE"])
			retention, err2 := time.ParseDuration(c.env["RETENTION"])
			if assert.NoError(t, err1, "%s: LEASE", c.where) && assert.NoError(t, err2, "%s: RETENTION", c.where) {
				assert.Greater(t, retention, lease, "%s: RETENTION must exceed LEASE", c.where)
			}
			assert.Contains(t, c.env, "DATABASE_URL", c.where)
			assert.NotEmpty(t, c.env["PSP_URL"], "%s: PSP_URL (empty means a mock of the reaper's own)", c.where)
		}
		for _, c := range cs {
			if c.binary() == "api" {
				assert.Contains(t, c.env, "DATABASE_URL", c.where)
				if c.serves() {
					assert.NotEmpty(t, c.env["PSP_URL"], "%s: PSP_URL (empty means an in-process mock per replica)", c.where)
				}
			}
		}
	}
}

// ---------------------------------------------------------------------------
// docker-compose.yml.

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image           string         `yaml:"image"`
	Build           *composeBuild  `yaml:"build"`
	Entrypoint      flexList       `yaml:"entrypoint"`
	Command         flexList       `yaml:"command"`
	Environment     yaml.Node      `yaml:"environment"`
	Ports           []yaml.Node    `yaml:"ports"`
	Volumes         []yaml.Node    `yaml:"volumes"`
	DependsOn       yaml.Node      `yaml:"depends_on"`
	Networks        yaml.Node      `yaml:"networks"`
	StopGracePeriod string         `yaml:"stop_grace_period"`
	Healthcheck     map[string]any `yaml:"healthcheck"`
	Restart         string         `yaml:"restart"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

// flexList is a compose command/entrypoint: a list, or a string split on
// white space.
type flexList struct {
	set bool
	v   []string
}

func (l *flexList) UnmarshalYAML(n *yaml.Node) error {
	l.set = true
	if n.Kind == yaml.ScalarNode {
		l.v = strings.Fields(n.Value)
		return nil
	}
	return n.Decode(&l.v)
}

var (
	composeOnce sync.Once
	composeVal  composeFile
)

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	composeOnce.Do(func() {
		data, err := os.ReadFile(composePath)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(data, &composeVal), composePath)
	})
	require.NotEmpty(t, composeVal.Services, "compose services")
	return composeVal
}

// interpolationRe matches compose's ${VAR}, ${VAR:-default}, ${VAR-default}.
var interpolationRe = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}`)

// composeValue resolves interpolations to their defaults (as with an empty
// shell environment).
func composeValue(v string) string {
	return interpolationRe.ReplaceAllString(v, "$1")
}

func (s composeService) env(t *testing.T, where string) map[string]string {
	t.Helper()
	out := map[string]string{}
	n := deref(&s.Environment)
	switch n.Kind {
	case 0:
	case yaml.MappingNode:
		var m map[string]any
		require.NoError(t, n.Decode(&m), "%s: environment", where)
		for k, v := range m {
			if v == nil {
				out[k] = ""
				continue
			}
			out[k] = composeValue(fmt.Sprint(v))
		}
	case yaml.SequenceNode:
		var l []string
		require.NoError(t, n.Decode(&l), "%s: environment", where)
		for _, kv := range l {
			k, v, _ := strings.Cut(kv, "=")
			out[k] = composeValue(v)
		}
	default:
		t.Errorf("%s: environment is neither a map nor a list", where)
	}
	return out
}

// containerPorts returns the container side of `ports:`.
func (s composeService) containerPorts(t *testing.T, where string) []int {
	t.Helper()
	var out []int
	for _, n := range s.Ports {
		var spec string
		switch n.Kind {
		case yaml.ScalarNode:
			spec = n.Value
		case yaml.MappingNode:
			var m struct {
				Target any `yaml:"target"`
			}
			require.NoError(t, n.Decode(&m))
			spec = fmt.Sprint(m.Target)
		}
		parts := strings.Split(spec, ":")
		p, err := strconv.Atoi(strings.Split(parts[len(parts)-1], "/")[0])
		if assert.NoError(t, err, "%s: port %q", where, spec) {
			out = append(out, p)
		}
	}
	return out
}

// bindMounts returns source -> target of the bind mounts.
func (s composeService) bindMounts(t *testing.T, where string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, n := range s.Volumes {
		var src, dst string
		switch n.Kind {
		case yaml.ScalarNode:
			parts := strings.Split(n.Value, ":")
			require.GreaterOrEqual(t, len(parts), 2, "%s: volume %q", where, n.Value)
			src, dst = parts[0], parts[1]
		case yaml.MappingNode:
			var m struct{ Type, Source, Target string }
			require.NoError(t, n.Decode(&m))
			if m.Type != "bind" {
				continue
			}
			src, dst = m.Source, m.Target
		}
		if strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/") {
			out[src] = dst
		}
	}
	return out
}

// dependsOn returns service -> condition.
func (s composeService) dependsOn(t *testing.T, where string) map[string]string {
	t.Helper()
	out := map[string]string{}
	n := deref(&s.DependsOn)
	switch n.Kind {
	case 0:
	case yaml.SequenceNode:
		var l []string
		require.NoError(t, n.Decode(&l), "%s: depends_on", where)
		for _, d := range l {
			out[d] = "service_started"
		}
	case yaml.MappingNode:
		var m map[string]struct {
			Condition string `yaml:"condition"`
		}
		require.NoError(t, n.Decode(&m), "%s: depends_on", where)
		for d, c := range m {
			if c.Condition == "" {
				c.Condition = "service_started"
			}
			out[d] = c.Condition
		}
	}
	return out
}

// aliases returns the network aliases of the service.
func (s composeService) aliases(t *testing.T, where string) []string {
	t.Helper()
	n := deref(&s.Networks)
	if n.Kind != yaml.MappingNode {
		return nil
	}
	var m map[string]*struct {
		Aliases []string `yaml:"aliases"`
	}
	require.NoError(t, n.Decode(&m), "%s: networks", where)
	var out []string
	for _, n := range m {
		if n != nil {
			out = append(out, n.Aliases...)
		}
	}
	return out
}

// deref follows a YAML alias (environment: *api-env).
func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func (s composeService) isApp() bool { return s.Image == appImage || s.Build != nil }

func composeAppContainers(t *testing.T, cf composeFile) []appContainer {
	t.Helper()
	img := dockerImage(t)
	var out []appContainer
	for _, name := range slices.Sorted(maps.Keys(cf.Services)) {
		s := cf.Services[name]
		if !s.isApp() {
			continue
		}
		where := composePath + " service " + name
		c := appContainer{where: where, system: "compose", image: s.Image, env: s.env(t, where), ports: map[string]int{}, replicas: 1}
		// Compose: an entrypoint drops the image's CMD; a command replaces it.
		switch {
		case s.Entrypoint.set:
			c.entrypoint, c.args = s.Entrypoint.v, s.Command.v
		case s.Command.set:
			c.entrypoint, c.args = img.entrypoint, s.Command.v
		default:
			c.entrypoint, c.args = img.entrypoint, img.cmd
		}
		for _, p := range s.containerPorts(t, where) {
			c.ports[strconv.Itoa(p)] = p
		}
		out = append(out, c)
	}
	return out
}

func imageRepo(image string) (repo, tag string) {
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		return image[:i], image[i+1:]
	}
	return image, ""
}

func TestCompose(t *testing.T) {
	facts := codeFactsT(t)
	cf := loadCompose(t)

	// Host names as other containers see them: service names and aliases.
	hosts := map[string][]string{}
	for name, s := range cf.Services {
		hosts[name] = append(hosts[name], name)
		for _, a := range s.aliases(t, name) {
			hosts[a] = append(hosts[a], name)
		}
	}
	apps := map[string]appContainer{}
	for _, c := range composeAppContainers(t, cf) {
		apps[strings.TrimPrefix(c.where, composePath+" service ")] = c
	}
	// listening returns the ports the services behind host listen on (app
	// services only) and whether host resolves at all.
	listening := func(host string) (ports []int, app bool, ok bool) {
		services, ok := hosts[host]
		for _, s := range services {
			if c, isApp := apps[s]; isApp {
				app = true
				if p, ok := c.listenPort(); ok {
					ports = append(ports, p)
				}
			}
		}
		return ports, app, ok
	}
	// scraped is listening for the /metrics listeners.
	scraped := func(host string) (ports []int, app bool, ok bool) {
		services, ok := hosts[host]
		for _, s := range services {
			if c, isApp := apps[s]; isApp {
				app = true
				if p, ok := c.metricsPort(); ok {
					ports = append(ports, p)
				}
			}
		}
		return ports, app, ok
	}

	var postgres, collector, proxy string
	for _, name := range slices.Sorted(maps.Keys(cf.Services)) {
		s := cf.Services[name]
		where := composePath + " service " + name
		if s.isApp() {
			assert.Equal(t, appImage, s.Image, "%s: image", where)
			if assert.NotNil(t, s.Build, "%s: build (for `up --build`)", where) {
				ctx := filepath.Join(".", s.Build.Context)
				_, err := os.Stat(filepath.Join(ctx, "go.mod"))
				assert.NoError(t, err, "%s: build context %q must be the repository root", where, s.Build.Context)
				df, _ := filepath.Abs(filepath.Join(ctx, s.Build.Dockerfile))
				self, _ := filepath.Abs(dockerfilePath)
				assert.Equal(t, self, df, "%s: build.dockerfile", where)
			}
			c := apps[name]
			// Longer than the API's drain, so SIGKILL never cuts it short.
			if c.serves() {
				d, err := time.ParseDuration(s.StopGracePeriod)
				if assert.NoError(t, err, "%s: stop_grace_period", where) {
					assert.Greater(t, d, facts.shutdownTimeout, "%s: stop_grace_period vs cmd/api ShutdownTimeout", where)
				}
			}
			// Hosts named in URLs exist, on the right port.
			if v := c.env["PSP_URL"]; v != "" {
				u, err := url.Parse(v)
				if assert.NoError(t, err) {
					ports, _, ok := listening(u.Hostname())
					assert.True(t, ok, "%s: PSP_URL host %q is no compose service", where, u.Hostname())
					assert.Contains(t, ports, portOf(u), "%s: PSP_URL port vs the mock PSP's MOCKPSP_ADDR", where)
				}
			}
			if v := c.env["OTEL_EXPORTER_OTLP_ENDPOINT"]; v != "" {
				u, err := url.Parse(v)
				if assert.NoError(t, err) {
					_, _, ok := listening(u.Hostname())
					assert.True(t, ok, "%s: OTLP endpoint host %q is no compose service", where, u.Hostname())
					assert.Equal(t, collectorOTLPPort(t, c.env["OTEL_EXPORTER_OTLP_PROTOCOL"]), portOf(u),
						"%s: OTLP endpoint port vs %s", where, collectorConfigPath)
				}
			}
			if v := c.env["DATABASE_URL"]; v != "" {
				u, err := url.Parse(v)
				if assert.NoError(t, err) {
					services := hosts[u.Hostname()]
					if assert.Len(t, services, 1, "%s: DATABASE_URL host %q", where, u.Hostname()) {
						pg := cf.Services[services[0]]
						repo, _ := imageRepo(pg.Image)
						assert.Equal(t, "postgres", repo, "%s: DATABASE_URL points at %s", where, services[0])
						assert.Equal(t, pg.env(t, services[0])["POSTGRES_DB"], strings.TrimPrefix(u.Path, "/"), "%s: database name", where)
					}
				}
			}
			// Ordering: the database is migrated before anything uses it.
			deps := s.dependsOn(t, where)
			switch {
			case c.binary() == "api" && !c.serves(): // migrate
				assert.NotEqual(t, "unless-stopped", s.Restart, "%s: one-shot", where)
				assert.NotEqual(t, "always", s.Restart, "%s: one-shot", where)
			case c.env["DATABASE_URL"] != "":
				var migrated bool
				for dep, cond := range deps {
					if d, ok := apps[dep]; ok && d.binary() == "api" && !d.serves() {
						migrated = cond == "service_completed_successfully"
					}
				}
				assert.True(t, migrated, "%s: depends_on the migrate service, condition service_completed_successfully", where)
			}
		} else {
			repo, tag := imageRepo(s.Image)
			assert.Contains(t, thirdPartyImages, repo, "%s: image %q is neither %s nor a known third-party image", where, s.Image, appImage)
			assert.NotEmpty(t, tag, "%s: pin a tag", where)
			assert.NotEqual(t, "latest", tag, "%s: pin a tag", where)
			switch repo {
			case "postgres":
				postgres = name
			case "otel/opentelemetry-collector-contrib":
				collector = name
			case "nginx":
				proxy = name
			}
		}
		for dep, cond := range s.dependsOn(t, where) {
			if assert.Contains(t, cf.Services, dep, "%s: depends_on", where) && cond == "service_healthy" {
				assert.NotEmpty(t, cf.Services[dep].Healthcheck, "%s: depends_on %s healthy, but it has no healthcheck", where, dep)
			}
		}
		for src := range s.bindMounts(t, where) {
			_, err := os.Stat(src)
			assert.NoError(t, err, "%s: bind mount source %s (relative to deploy/)", where, src)
		}
	}

	// PostgreSQL: healthcheck with pg_isready; the migration waits for it.
	require.NotEmpty(t, postgres, "a postgres service")
	assert.Contains(t, fmt.Sprint(cf.Services[postgres].Healthcheck["test"]), "pg_isready")
	for name, c := range apps {
		if c.binary() == "api" && !c.serves() {
			assert.Equal(t, "service_healthy", cf.Services[name].dependsOn(t, name)[postgres], "migrate waits for postgres to be healthy")
		}
	}

	// The collector and Prometheus mount this folder's configs, and every
	// target they scrape resolves to a service listening on that port.
	require.NotEmpty(t, collector, "an otel-collector service")
	assert.Contains(t, slices.Collect(maps.Keys(cf.Services[collector].bindMounts(t, collector))), "./"+collectorConfigPath)
	var prom, grafana string
	for name, s := range cf.Services {
		switch repo, _ := imageRepo(s.Image); repo {
		case "prom/prometheus":
			prom = name
		case "grafana/grafana":
			grafana = name
		}
	}
	require.NotEmpty(t, prom, "a prometheus service")
	assert.Equal(t, "/etc/prometheus", cf.Services[prom].bindMounts(t, prom)["./prometheus"], "prometheus mounts deploy/prometheus")
	require.NotEmpty(t, grafana, "a grafana service")
	gm := cf.Services[grafana].bindMounts(t, grafana)
	assert.Equal(t, "/etc/grafana/provisioning", gm["./grafana/provisioning"])
	assert.Contains(t, gm, "./grafana/phasepay-dashboard.json")

	for _, file := range []string{promConfigPath, collectorConfigPath} {
		for _, target := range scrapeTargetsIn(t, file) {
			host, port, err := net.SplitHostPort(target)
			require.NoError(t, err, "%s target %s", file, target)
			ports, app, ok := scraped(host)
			if !assert.True(t, ok, "%s scrapes %s: no compose service or alias %q", file, target, host) || !app {
				continue
			}
			p, _ := strconv.Atoi(port)
			for _, lp := range ports {
				assert.Equal(t, lp, p, "%s scrapes %s, but a service behind %q listens on %d", file, target, host, lp)
			}
		}
	}

	// nginx balances over exactly the API replicas, on their port.
	require.NotEmpty(t, proxy, "a proxy (nginx) service")
	assert.Equal(t, "/etc/nginx/conf.d/default.conf", cf.Services[proxy].bindMounts(t, proxy)["./"+nginxConfPath])
	conf, err := os.ReadFile(nginxConfPath)
	require.NoError(t, err)
	upstreams := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^\s*server\s+([A-Za-z0-9.\-]+):(\d+)\b`).FindAllStringSubmatch(string(conf), -1) {
		upstreams[m[1]], _ = strconv.Atoi(m[2])
	}
	var replicas []string
	for name, c := range apps {
		if c.binary() == "api" && c.serves() {
			replicas = append(replicas, name)
			if p, ok := c.listenPort(); ok {
				assert.Equal(t, p, upstreams[name], "%s upstream %s port vs its API_ADDR", nginxConfPath, name)
			}
		}
	}
	slices.Sort(replicas)
	assert.Equal(t, replicas, slices.Sorted(maps.Keys(upstreams)), "%s upstreams vs the compose api replicas", nginxConfPath)
	if m := regexp.MustCompile(`(?m)^\s*listen\s+(\d+)\s*;`).FindStringSubmatch(string(conf)); assert.NotNil(t, m, "nginx listen") {
		p, _ := strconv.Atoi(m[1])
		assert.Contains(t, cf.Services[proxy].containerPorts(t, proxy), p, "the proxy publishes its listen port")
	}
}

func portOf(u *url.URL) int {
	if p := u.Port(); p != "" {
		n, _ := strconv.Atoi(p)
		return n
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

// collectorOTLPPort is the port of the collector's OTLP receiver for the
// given OTEL_EXPORTER_OTLP_PROTOCOL (the Go SDK's default: http/protobuf).
func collectorOTLPPort(t *testing.T, protocol string) int {
	t.Helper()
	var cfg struct {
		Receivers struct {
			OTLP struct {
				Protocols map[string]struct {
					Endpoint string `yaml:"endpoint"`
				} `yaml:"protocols"`
			} `yaml:"otlp"`
		} `yaml:"receivers"`
	}
	data, err := os.ReadFile(collectorConfigPath)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &cfg))
	proto := "http"
	if protocol == "grpc" {
		proto = "grpc"
	}
	_, port, err := net.SplitHostPort(cfg.Receivers.OTLP.Protocols[proto].Endpoint)
	require.NoError(t, err, "%s: otlp %s endpoint", collectorConfigPath, proto)
	n, _ := strconv.Atoi(port)
	return n
}

// scrapeTargetsIn returns the static scrape targets of prometheus.yml or of
// the collector's prometheus receiver.
func scrapeTargetsIn(t *testing.T, file string) []string {
	t.Helper()
	type scrapeConfigs struct {
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	var doc struct {
		scrapeConfigs `yaml:",inline"`
		Receivers     struct {
			Prometheus struct {
				Config scrapeConfigs `yaml:"config"`
			} `yaml:"prometheus"`
		} `yaml:"receivers"`
	}
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &doc), file)
	var out []string
	for _, sc := range append(doc.ScrapeConfigs, doc.Receivers.Prometheus.Config.ScrapeConfigs...) {
		for _, st := range sc.StaticConfigs {
			out = append(out, st.Targets...)
		}
	}
	require.NotEmpty(t, out, "%s: scrape targets", file)
	return out
}

// ---------------------------------------------------------------------------
// Kubernetes.

type k8sMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type k8sObject struct {
	APIVersion string  `yaml:"apiVersion"`
	Kind       string  `yaml:"kind"`
	Metadata   k8sMeta `yaml:"metadata"`
	file       string
	node       *yaml.Node
}

func (o k8sObject) id() string { return o.file + " " + o.Kind + "/" + o.Metadata.Name }

// intOrString is a port (number or name) or a PDB count.
type intOrString string

func (v *intOrString) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number or a name", n.Line)
	}
	*v = intOrString(n.Value)
	return nil
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string      `yaml:"path"`
		Port intOrString `yaml:"port"`
	} `yaml:"httpGet"`
	TCPSocket *struct {
		Port intOrString `yaml:"port"`
	} `yaml:"tcpSocket"`
	Exec *struct {
		Command []string `yaml:"command"`
	} `yaml:"exec"`
}

type k8sKeyRef struct {
	Name string `yaml:"name"`
	Key  string `yaml:"key"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Ports   []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env []struct {
		Name      string    `yaml:"name"`
		Value     yaml.Node `yaml:"value"`
		ValueFrom *struct {
			ConfigMapKeyRef *k8sKeyRef `yaml:"configMapKeyRef"`
			SecretKeyRef    *k8sKeyRef `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	EnvFrom []struct {
		ConfigMapRef *struct {
			Name string `yaml:"name"`
		} `yaml:"configMapRef"`
		SecretRef *struct {
			Name string `yaml:"name"`
		} `yaml:"secretRef"`
	} `yaml:"envFrom"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	StartupProbe   *k8sProbe `yaml:"startupProbe"`
	Lifecycle      *struct {
		PreStop *struct {
			Sleep *struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
			Exec    any `yaml:"exec"`
			HTTPGet any `yaml:"httpGet"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	SecurityContext *struct {
		AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
		ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
		RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
		RunAsUser                *int64 `yaml:"runAsUser"`
		Capabilities             struct {
			Drop []string `yaml:"drop"`
		} `yaml:"capabilities"`
	} `yaml:"securityContext"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type k8sPodTemplate struct {
	Metadata k8sMeta `yaml:"metadata"`
	Spec     struct {
		TerminationGracePeriodSeconds *int   `yaml:"terminationGracePeriodSeconds"`
		RestartPolicy                 string `yaml:"restartPolicy"`
		SecurityContext               struct {
			RunAsNonRoot *bool  `yaml:"runAsNonRoot"`
			RunAsUser    *int64 `yaml:"runAsUser"`
		} `yaml:"securityContext"`
		Containers     []k8sContainer `yaml:"containers"`
		InitContainers []k8sContainer `yaml:"initContainers"`
	} `yaml:"spec"`
}

type k8sWorkload struct {
	k8sObject `yaml:",inline"`
	Spec      struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template     k8sPodTemplate `yaml:"template"`
		BackoffLimit *int           `yaml:"backoffLimit"`
	} `yaml:"spec"`
}

type k8sService struct {
	k8sObject `yaml:",inline"`
	Spec      struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string      `yaml:"name"`
			Port       int         `yaml:"port"`
			TargetPort intOrString `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type k8sPDB struct {
	k8sObject `yaml:",inline"`
	Spec      struct {
		MinAvailable   *intOrString `yaml:"minAvailable"`
		MaxUnavailable *intOrString `yaml:"maxUnavailable"`
		Selector       struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
	} `yaml:"spec"`
}

type k8sHPA struct {
	k8sObject `yaml:",inline"`
	Spec      struct {
		ScaleTargetRef struct {
			APIVersion string `yaml:"apiVersion"`
			Kind       string `yaml:"kind"`
			Name       string `yaml:"name"`
		} `yaml:"scaleTargetRef"`
		MinReplicas *int `yaml:"minReplicas"`
		MaxReplicas int  `yaml:"maxReplicas"`
		Metrics     []struct {
			Type     string `yaml:"type"`
			Resource *struct {
				Name   string `yaml:"name"`
				Target struct {
					Type               string `yaml:"type"`
					AverageUtilization *int   `yaml:"averageUtilization"`
				} `yaml:"target"`
			} `yaml:"resource"`
		} `yaml:"metrics"`
	} `yaml:"spec"`
}

type k8sSet struct {
	objects    []k8sObject
	workloads  []k8sWorkload
	services   []k8sService
	pdbs       []k8sPDB
	hpas       []k8sHPA
	configMaps map[string]map[string]*yaml.Node // name -> key -> value node
	secrets    map[string]map[string]bool       // name -> keys
}

func (s *k8sSet) workload(kind, name string) *k8sWorkload {
	for i := range s.workloads {
		if s.workloads[i].Kind == kind && s.workloads[i].Metadata.Name == name {
			return &s.workloads[i]
		}
	}
	return nil
}

// yamlDocuments decodes every document of a YAML file.
func yamlDocuments(t *testing.T, file string) []*yaml.Node {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, file)
		if len(n.Content) > 0 && n.Content[0].Kind == yaml.MappingNode {
			docs = append(docs, &n)
		}
	}
	return docs
}

var (
	k8sOnce sync.Once
	k8sVal  *k8sSet
)

// loadK8s reads every Kubernetes object of every YAML file under deploy/
// (any document with apiVersion and kind other than the kustomization).
func loadK8s(t *testing.T) *k8sSet {
	t.Helper()
	k8sOnce.Do(func() {
		set := &k8sSet{configMaps: map[string]map[string]*yaml.Node{}, secrets: map[string]map[string]bool{}}
		err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			if ext := filepath.Ext(p); ext != ".yaml" && ext != ".yml" {
				return nil
			}
			for _, doc := range yamlDocuments(t, p) {
				var o k8sObject
				if doc.Decode(&o) != nil || o.APIVersion == "" || o.Kind == "" || o.Kind == "Kustomization" {
					continue
				}
				o.file, o.node = filepath.ToSlash(p), doc
				set.objects = append(set.objects, o)
				switch o.Kind {
				case "Deployment", "Job", "StatefulSet", "DaemonSet":
					var w k8sWorkload
					require.NoError(t, doc.Decode(&w), o.id())
					w.k8sObject = o
					set.workloads = append(set.workloads, w)
				case "Service":
					var s k8sService
					require.NoError(t, doc.Decode(&s), o.id())
					s.k8sObject = o
					set.services = append(set.services, s)
				case "PodDisruptionBudget":
					var pdb k8sPDB
					require.NoError(t, doc.Decode(&pdb), o.id())
					pdb.k8sObject = o
					set.pdbs = append(set.pdbs, pdb)
				case "HorizontalPodAutoscaler":
					var h k8sHPA
					require.NoError(t, doc.Decode(&h), o.id())
					h.k8sObject = o
					set.hpas = append(set.hpas, h)
				case "ConfigMap":
					// Values kept as nodes, to check that each is a string.
					var cm struct {
						Data yaml.Node `yaml:"data"`
					}
					require.NoError(t, doc.Decode(&cm), o.id())
					data := map[string]*yaml.Node{}
					for i := 0; i+1 < len(cm.Data.Content); i += 2 {
						data[cm.Data.Content[i].Value] = cm.Data.Content[i+1]
					}
					set.configMaps[o.Metadata.Name] = data
				case "Secret":
					var sec struct {
						Data       map[string]string `yaml:"data"`
						StringData map[string]string `yaml:"stringData"`
					}
					require.NoError(t, doc.Decode(&sec), o.id())
					keys := map[string]bool{}
					for k := range sec.Data {
						keys[k] = true
					}
					for k := range sec.StringData {
						keys[k] = true
					}
					set.secrets[o.Metadata.Name] = keys
				}
			}
			return nil
		})
		require.NoError(t, err)
		k8sVal = set
	})
	require.NotNil(t, k8sVal)
	require.NotEmpty(t, k8sVal.objects, "Kubernetes objects under deploy/")
	return k8sVal
}

// k8sAppContainers returns every container of every workload, with the
// environment it gets (envFrom and valueFrom resolved against the ConfigMaps
// and Secrets of the set; an unresolved reference is an error).
func k8sAppContainers(t *testing.T, set *k8sSet) []appContainer {
	t.Helper()
	img := dockerImage(t)
	var out []appContainer
	for _, w := range set.workloads {
		for _, kc := range append(slices.Clone(w.Spec.Template.Spec.InitContainers), w.Spec.Template.Spec.Containers...) {
			where := w.id() + " container " + kc.Name
			c := appContainer{where: where, system: "k8s", image: kc.Image, env: map[string]string{}, ports: map[string]int{}, replicas: 1, shared: map[string]bool{}}
			if w.Spec.Replicas != nil {
				c.replicas = *w.Spec.Replicas
			}
			// Kubernetes: command replaces ENTRYPOINT and drops CMD; args replaces CMD.
			switch {
			case kc.Command != nil:
				c.entrypoint, c.args = kc.Command, kc.Args
			case kc.Args != nil:
				c.entrypoint, c.args = img.entrypoint, kc.Args
			default:
				c.entrypoint, c.args = img.entrypoint, img.cmd
			}
			for _, p := range kc.Ports {
				name := p.Name
				if name == "" {
					name = strconv.Itoa(p.ContainerPort)
				}
				c.ports[name] = p.ContainerPort
			}
			for _, ef := range kc.EnvFrom {
				switch {
				case ef.ConfigMapRef != nil:
					data, ok := set.configMaps[ef.ConfigMapRef.Name]
					assert.True(t, ok, "%s: envFrom ConfigMap %q is not defined", where, ef.ConfigMapRef.Name)
					for k, v := range data {
						c.env[k], c.shared[k] = v.Value, true
					}
				case ef.SecretRef != nil:
					keys, ok := set.secrets[ef.SecretRef.Name]
					assert.True(t, ok, "%s: envFrom Secret %q is not defined", where, ef.SecretRef.Name)
					for k := range keys {
						c.env[k], c.shared[k] = "", true
					}
				}
			}
			for _, e := range kc.Env {
				delete(c.shared, e.Name)
				switch {
				case e.Value.Kind != 0:
					assert.Equal(t, "!!str", e.Value.ShortTag(), "%s: env %s: value must be a string (quote it)", where, e.Name)
					c.env[e.Name] = e.Value.Value
				case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
					ref := e.ValueFrom.ConfigMapKeyRef
					v, ok := set.configMaps[ref.Name][ref.Key]
					if assert.True(t, ok, "%s: env %s: ConfigMap %s has no key %s", where, e.Name, ref.Name, ref.Key) {
						c.env[e.Name] = v.Value
					}
				case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
					ref := e.ValueFrom.SecretKeyRef
					assert.True(t, set.secrets[ref.Name][ref.Key], "%s: env %s: Secret %s has no key %s", where, e.Name, ref.Name, ref.Key)
					c.env[e.Name] = ""
				default:
					c.env[e.Name] = ""
				}
			}
			out = append(out, c)
		}
	}
	return out
}

// selects reports whether a label selector matches the labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// resolvePort resolves a probe or Service target port against a
// container's ports.
func resolvePort(ports map[string]int, p intOrString) (int, bool) {
	if n, err := strconv.Atoi(string(p)); err == nil {
		return n, slices.Contains(slices.Collect(maps.Values(ports)), n)
	}
	n, ok := ports[string(p)]
	return n, ok
}

func TestKustomization(t *testing.T) {
	var k struct {
		APIVersion string   `yaml:"apiVersion"`
		Kind       string   `yaml:"kind"`
		Resources  []string `yaml:"resources"`
		Namespace  string   `yaml:"namespace"`
	}
	data, err := os.ReadFile(kustomizationPath)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &k))
	assert.Equal(t, "Kustomization", k.Kind)
	assert.Empty(t, k.Namespace, "the base sets no namespace")

	// Every object file under k8s/ is listed, and nothing else.
	set := loadK8s(t)
	files := map[string]bool{}
	for _, o := range set.objects {
		assert.True(t, strings.HasPrefix(o.file, k8sDir+"/"), "%s: Kubernetes objects belong in %s/", o.id(), k8sDir)
		assert.Empty(t, o.Metadata.Namespace, "%s: namespace-less", o.id())
		files[strings.TrimPrefix(o.file, k8sDir+"/")] = true
	}
	listed := slices.Clone(k.Resources)
	slices.Sort(listed)
	assert.Equal(t, slices.Sorted(maps.Keys(files)), listed, "kustomization resources vs the files under %s/", k8sDir)
}

func TestKubernetes(t *testing.T) {
	facts := codeFactsT(t)
	set := loadK8s(t)
	img := dockerImage(t)
	containers := map[string]appContainer{}
	for _, c := range k8sAppContainers(t, set) {
		containers[c.where] = c
	}
	for _, cm := range set.configMaps {
		for k, v := range cm {
			assert.Equal(t, "!!str", v.ShortTag(), "ConfigMap key %s: values must be strings (quote it)", k)
		}
	}

	var api, reaper *k8sWorkload
	for i := range set.workloads {
		w := &set.workloads[i]
		pod := w.Spec.Template
		where := w.id()

		// Selector matches the pod template.
		if w.Kind != "Job" {
			assert.True(t, selects(w.Spec.Selector.MatchLabels, pod.Metadata.Labels), "%s: selector %v does not match the template labels %v", where, w.Spec.Selector.MatchLabels, pod.Metadata.Labels)
		}
		// Non-root, read-only, no capabilities.
		if assert.NotNil(t, pod.Spec.SecurityContext.RunAsNonRoot, "%s: runAsNonRoot", where) {
			assert.True(t, *pod.Spec.SecurityContext.RunAsNonRoot, "%s: runAsNonRoot", where)
		}
		if u := pod.Spec.SecurityContext.RunAsUser; u != nil {
			assert.Equal(t, img.uid, *u, "%s: runAsUser vs the Dockerfile's USER", where)
		}
		for _, kc := range pod.Spec.Containers {
			cw := where + " container " + kc.Name
			sc := kc.SecurityContext
			if assert.NotNil(t, sc, "%s: securityContext", cw) {
				assert.True(t, sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "%s: readOnlyRootFilesystem", cw)
				assert.True(t, sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "%s: allowPrivilegeEscalation false", cw)
				assert.Contains(t, sc.Capabilities.Drop, "ALL", "%s: drop ALL capabilities", cw)
			}
			assert.NotEmpty(t, kc.Resources.Requests["cpu"], "%s: cpu request", cw)
			assert.NotEmpty(t, kc.Resources.Requests["memory"], "%s: memory request", cw)
			assert.NotEmpty(t, kc.Resources.Limits["memory"], "%s: memory limit", cw)

			c := containers[cw]
			// Probes: /readyz and /healthz of internal/httpapi on the API's port.
			for kind, p := range map[string]*k8sProbe{"readiness": kc.ReadinessProbe, "liveness": kc.LivenessProbe, "startup": kc.StartupProbe} {
				if p == nil {
					continue
				}
				assert.Nil(t, p.Exec, "%s: %s probe: exec needs a shell or tool the image does not have", cw, kind)
				var port intOrString
				switch {
				case p.HTTPGet != nil:
					port = p.HTTPGet.Port
					if assert.Equal(t, "api", c.binary(), "%s: %s probe: only the API serves HTTP health endpoints", cw, kind) {
						assert.True(t, facts.apiRoutes[p.HTTPGet.Path], "%s: %s probe path %s is not routed by internal/httpapi (%v)", cw, kind, p.HTTPGet.Path, slices.Sorted(maps.Keys(facts.apiRoutes)))
					}
				case p.TCPSocket != nil:
					port = p.TCPSocket.Port
				}
				n, ok := resolvePort(c.ports, port)
				if assert.True(t, ok, "%s: %s probe port %q is not a container port", cw, kind, port) {
					lp, _ := c.listenPort()
					assert.Equal(t, lp, n, "%s: %s probe port vs %s", cw, kind, listenEnv[c.binary()])
				}
			}
			if c.binary() == "api" && c.serves() {
				if assert.NotNil(t, kc.ReadinessProbe, "%s: readinessProbe", cw) && assert.NotNil(t, kc.ReadinessProbe.HTTPGet, "%s: readiness httpGet", cw) {
					assert.Equal(t, "/readyz", kc.ReadinessProbe.HTTPGet.Path, "%s: readiness on /readyz (PostgreSQL answers)", cw)
				}
				if assert.NotNil(t, kc.LivenessProbe, "%s: livenessProbe", cw) && assert.NotNil(t, kc.LivenessProbe.HTTPGet, "%s: liveness httpGet", cw) {
					assert.Equal(t, "/healthz", kc.LivenessProbe.HTTPGet.Path, "%s: liveness on /healthz (not the database)", cw)
				}
			}
			if kc.Lifecycle != nil && kc.Lifecycle.PreStop != nil {
				assert.Nil(t, kc.Lifecycle.PreStop.Exec, "%s: preStop exec needs a shell; use the sleep action", cw)
			}
			// Scrape annotations point at the /metrics listener.
			if port, ok := pod.Metadata.Annotations["prometheus.io/port"]; ok {
				lp, _ := c.metricsPort()
				assert.Equal(t, strconv.Itoa(lp), port, "%s: prometheus.io/port vs the /metrics listener", cw)
				assert.Equal(t, "/metrics", pod.Metadata.Annotations["prometheus.io/path"], "%s: prometheus.io/path", cw)
			}
			switch {
			case c.binary() == "api" && c.serves() && w.Kind == "Deployment":
				assert.Nil(t, api, "one api Deployment")
				api = w
			case c.binary() == "reaper" && w.Kind == "Deployment":
				assert.Nil(t, reaper, "one reaper Deployment")
				reaper = w
			case c.binary() == "api" && len(c.args) > 0 && c.args[0] == "migrate":
				assert.Equal(t, "Job", w.Kind, "%s: migrate runs as a Job", cw)
				assert.NotNil(t, w.Spec.BackoffLimit, "%s: backoffLimit", where)
				assert.Contains(t, []string{"Never", "OnFailure"}, pod.Spec.RestartPolicy, "%s: restartPolicy", where)
			}
		}
	}

	// api: two replicas, grace longer than the drain (and the preStop sleep).
	require.NotNil(t, api, "an api Deployment")
	if assert.NotNil(t, api.Spec.Replicas) {
		assert.Equal(t, 2, *api.Spec.Replicas, "api replicas")
	}
	var preStop time.Duration
	for _, kc := range api.Spec.Template.Spec.Containers {
		if kc.Lifecycle != nil && kc.Lifecycle.PreStop != nil && kc.Lifecycle.PreStop.Sleep != nil {
			preStop = time.Duration(kc.Lifecycle.PreStop.Sleep.Seconds) * time.Second
		}
	}
	if g := api.Spec.Template.Spec.TerminationGracePeriodSeconds; assert.NotNil(t, g, "api terminationGracePeriodSeconds") {
		assert.Greater(t, time.Duration(*g)*time.Second, preStop+facts.shutdownTimeout,
			"api terminationGracePeriodSeconds vs preStop sleep %s + cmd/api ShutdownTimeout %s", preStop, facts.shutdownTimeout)
	}
	require.NotNil(t, reaper, "a reaper Deployment")
	if assert.NotNil(t, reaper.Spec.Replicas) {
		assert.Equal(t, 2, *reaper.Spec.Replicas, "reaper replicas")
	}
	if g := reaper.Spec.Template.Spec.TerminationGracePeriodSeconds; assert.NotNil(t, g, "reaper terminationGracePeriodSeconds") {
		assert.Greater(t, time.Duration(*g)*time.Second, facts.shutdownTimeout, "reaper terminationGracePeriodSeconds")
	}
	assert.NotNil(t, set.workload("Job", "migrate"), "a migrate Job")

	// podsOf returns the workloads whose pods a selector matches.
	podsOf := func(selector map[string]string) []*k8sWorkload {
		var out []*k8sWorkload
		for i := range set.workloads {
			if selects(selector, set.workloads[i].Spec.Template.Metadata.Labels) {
				out = append(out, &set.workloads[i])
			}
		}
		return out
	}

	// PDB and HPA target the api Deployment (and nothing else).
	require.Len(t, set.pdbs, 1, "one PodDisruptionBudget")
	pdb := set.pdbs[0]
	assert.Equal(t, []*k8sWorkload{api}, podsOf(pdb.Spec.Selector.MatchLabels), "PDB selects exactly the api pods")
	if assert.NotNil(t, pdb.Spec.MinAvailable, "PDB minAvailable") {
		assert.Equal(t, intOrString("1"), *pdb.Spec.MinAvailable)
	}
	require.Len(t, set.hpas, 1, "one HorizontalPodAutoscaler")
	hpa := set.hpas[0]
	assert.Equal(t, "autoscaling/v2", hpa.APIVersion)
	assert.Equal(t, "Deployment", hpa.Spec.ScaleTargetRef.Kind)
	assert.Equal(t, "apps/v1", hpa.Spec.ScaleTargetRef.APIVersion)
	assert.Equal(t, api.Metadata.Name, hpa.Spec.ScaleTargetRef.Name, "HPA scales the api Deployment")
	if assert.NotNil(t, hpa.Spec.MinReplicas) {
		assert.Equal(t, 2, *hpa.Spec.MinReplicas)
	}
	assert.Equal(t, 10, hpa.Spec.MaxReplicas)
	if assert.Len(t, hpa.Spec.Metrics, 1) && assert.NotNil(t, hpa.Spec.Metrics[0].Resource) {
		r := hpa.Spec.Metrics[0].Resource
		assert.Equal(t, "cpu", r.Name)
		assert.Equal(t, "Utilization", r.Target.Type)
		if assert.NotNil(t, r.Target.AverageUtilization) {
			assert.Equal(t, 70, *r.Target.AverageUtilization)
		}
	}

	// Services select the pods of one workload and target its ports.
	services := map[string]int{} // name -> port, for URLs below
	for _, s := range set.services {
		ws := podsOf(s.Spec.Selector)
		if !assert.Len(t, ws, 1, "%s: selector %v must match the pods of exactly one workload", s.id(), s.Spec.Selector) {
			continue
		}
		require.NotEmpty(t, s.Spec.Ports, s.id())
		for _, sp := range s.Spec.Ports {
			target := sp.TargetPort
			if target == "" {
				target = intOrString(strconv.Itoa(sp.Port))
			}
			var found bool
			for _, kc := range ws[0].Spec.Template.Spec.Containers {
				c := containers[ws[0].id()+" container "+kc.Name]
				if n, ok := resolvePort(c.ports, target); ok {
					found = true
					services[s.Metadata.Name] = sp.Port
					lp, _ := c.listenPort()
					assert.Equal(t, lp, n, "%s: targetPort vs %s", s.id(), listenEnv[c.binary()])
				}
			}
			assert.True(t, found, "%s: targetPort %q is no container port of %s", s.id(), target, ws[0].id())
		}
	}
	assert.Contains(t, services, api.Metadata.Name, "a Service for the api")

	// PSP_URL names a Service of this base (the mock) on its port, or an
	// outside host.
	for _, c := range containers {
		if v := c.env["PSP_URL"]; v != "" {
			u, err := url.Parse(v)
			require.NoError(t, err)
			if p, ok := services[u.Hostname()]; ok {
				assert.Equal(t, p, portOf(u), "%s: PSP_URL port vs Service %s", c.where, u.Hostname())
			}
		}
	}
}

// TestKustomizeBuild renders the base with kubectl, when it is installed.
func TestKustomizeBuild(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl not installed; the structural checks above are what runs here")
	}
	out, err := exec.Command(kubectl, "kustomize", k8sDir).CombinedOutput()
	require.NoError(t, err, "kubectl kustomize %s:\n%s", k8sDir, out)
	dec := yaml.NewDecoder(bytes.NewReader(out))
	var n int
	for {
		var v map[string]any
		if err := dec.Decode(&v); errors.Is(err, io.EOF) {
			break
		} else if !assert.NoError(t, err) {
			break
		}
		if v != nil {
			n++
		}
	}
	assert.Len(t, loadK8s(t).objects, n, "objects rendered by kubectl kustomize vs the files")
}

// ---------------------------------------------------------------------------
// make compose-up.

func TestMakeComposeUp(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	require.NoError(t, err)
	mk := string(data)
	assert.Regexp(t, `(?m)^## compose-up: \S`, mk, "help line")
	m := regexp.MustCompile(`(?m)^compose-up:.*\n((?:\t.*\n)+)`).FindStringSubmatch(mk)
	require.NotNil(t, m, "compose-up target")
	assert.Contains(t, m[1], "docker compose -f deploy/"+composePath+" up --build")
}
