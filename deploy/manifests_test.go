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
)

const (
	// appImage is the only image of our own that the k8s manifests may
	// run: the one a release publishes, pinned by an overlay's images:.
	appImage = "ghcr.io/phasepay/phasepay:latest"
	// composeImage is the name compose gives the image it builds from
	// deploy/Dockerfile (pull_policy: build): a local name no registry
	// serves, so compose can never run an image it did not build.
	composeImage = "phasepay:compose"
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

// contractEnv are the variables docs/operations.md's table of variables names (besides
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
	want := appImage
	if c.system == "compose" {
		want = composeImage
	}
	if c.image != want {
		t.Errorf("%s: image %q, want %q", c.where, c.image, want)
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
