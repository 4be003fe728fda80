package deploy_test

// docker-compose.yml and `make compose-up`, against the image and the code.

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
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

// ---------------------------------------------------------------------------
// docker-compose.yml.

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Image           string         `yaml:"image"`
	PullPolicy      string         `yaml:"pull_policy"`
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

func (s composeService) isApp() bool {
	return s.Image == appImage || s.Image == composeImage || s.Build != nil
}

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
			assert.Equal(t, composeImage, s.Image, "%s: image", where)
			assert.Equal(t, "build", s.PullPolicy, "%s: pull_policy: compose builds the image, never pulls one", where)
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
			require.NoError(t, err, "%s: bind mount source %s (relative to deploy/)", where, src)
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

	scrapedServices := map[string][]string{}
	for _, file := range []string{promConfigPath, collectorConfigPath} {
		for _, target := range scrapeTargetsIn(t, file) {
			host, port, err := net.SplitHostPort(target)
			require.NoError(t, err, "%s target %s", file, target)
			ports, app, ok := scraped(host)
			if !assert.True(t, ok, "%s scrapes %s: no compose service or alias %q", file, target, host) || !app {
				continue
			}
			// A name shared by several replicas (a network alias) reaches
			// one of them per scrape, so their series would mix.
			assert.Len(t, hosts[host], 1, "%s scrapes %s, which names several replicas %v: list one target per replica", file, target, hosts[host])
			scrapedServices[file] = append(scrapedServices[file], hosts[host]...)
			p, _ := strconv.Atoi(port)
			for _, lp := range ports {
				assert.Equal(t, lp, p, "%s scrapes %s, but a service behind %q listens on %d", file, target, host, lp)
			}
		}
	}

	// Every replica that serves /metrics is scraped, by its own name.
	for name, c := range apps {
		if _, ok := c.metricsPort(); !ok || c.binary() == "mockpsp" {
			continue
		}
		for _, file := range []string{promConfigPath, collectorConfigPath} {
			assert.Contains(t, scrapedServices[file], name, "%s does not scrape replica %s", file, name)
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

// Every application service of compose runs a command that exists in the
// image deploy/Dockerfile builds: its entrypoint (the image's own, or the
// service's) is a binary the runtime stage copies in, and an api service's
// first argument is a subcommand of cmd/api. Compose builds that image
// itself (pull_policy: build), so this is the image it runs.
func TestComposeCommandsExistInTheImage(t *testing.T) {
	img := dockerImage(t)
	require.NotEmpty(t, img.binaries, "the Dockerfile copies no binary into "+binDir)
	facts := codeFactsT(t)
	apps := composeAppContainers(t, loadCompose(t))
	require.NotEmpty(t, apps)
	for _, c := range apps {
		require.NotEmpty(t, c.entrypoint, "%s: no entrypoint", c.where)
		exe := c.entrypoint[0]
		assert.True(t, strings.HasPrefix(exe, binDir) && slices.Contains(img.binaries, strings.TrimPrefix(exe, binDir)),
			"%s: runs %s, which the image does not contain (it has %v in %s)", c.where, exe, img.binaries, binDir)
		if path.Base(exe) == "api" {
			if assert.NotEmpty(t, c.args, "%s: api without a subcommand", c.where) {
				assert.Contains(t, facts.apiCommands, c.args[0], "%s: api %s is not a subcommand of cmd/api", c.where, c.args[0])
			}
		}
	}
}
