// Package scripts_test runs the shell scripts of `make run` and `make test`
// the way the Makefile does.
//
// run-dev tries every address the stack listens on before it starts
// anything, and stops with one line naming the port and the variable that
// moves it. Without that, make run said "phasepay is running" while its api
// crash-looped and another server answered the health check.
//
//	go test ./scripts/ -run '^TestRunDevRefusesATakenPort$'
package scripts_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// closedAddr returns a loopback host and port on which nothing listens.
func closedAddr(t *testing.T) (string, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	host, port, err := net.SplitHostPort(l.Addr().String())
	require.NoError(t, err)
	require.NoError(t, l.Close())
	return host, port
}

// ensure-postgres must check the server DATABASE_URL names, not a fixed
// 127.0.0.1:5432: a URL naming a dead port fails with that port in its one
// line, whether it comes as the argument or from DATABASE_URL, in URL or
// keyword=value form.
func TestEnsurePostgresChecksTheServerOfDatabaseURL(t *testing.T) {
	t.Parallel()
	host, port := closedAddr(t)
	for name, tc := range map[string]struct{ arg, env string }{
		"argument URL":           {arg: "postgres://postgres@" + host + ":" + port + "/phasepay?sslmode=disable"},
		"argument keyword=value": {arg: "host=" + host + " port=" + port + " user=postgres dbname=phasepay"},
		"DATABASE_URL":           {env: "postgres://u:secret@" + host + ":" + port + "/x"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command("./ensure-postgres")
			if tc.arg != "" {
				cmd.Args = append(cmd.Args, tc.arg)
			}
			cmd.Env = append(cmd.Environ(), "DATABASE_URL="+tc.env)
			out, err := cmd.CombinedOutput()
			require.Error(t, err, "%s", out)
			msg := strings.TrimSpace(string(out))
			require.Contains(t, msg, host+":"+port)
			require.NotContains(t, msg, "\n", "one line")
			require.NotContains(t, msg, "secret", "never print a password")
		})
	}
}

// The server the tests run against answers, so the script says nothing and
// succeeds for its URL.
func TestEnsurePostgresAcceptsALiveServer(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("./ensure-postgres", testdb.Admin(t))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(string(out)))
}

// The curl `make run` prints must run as pasted, with curl alone (no
// uuidgen, no command substitution), and show the response headers that
// matter to a retrying client (Idempotent-Replayed, Retry-After).
func TestRunDevCurlNeedsOnlyCurlAndShowsHeaders(t *testing.T) {
	t.Parallel()
	curl, err := exec.LookPath("curl")
	require.NoError(t, err, "curl is needed to run the printed command")
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)

	script, err := os.ReadFile("run-dev")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(script), "cat <<MSG\n")
	require.True(t, ok, "run-dev prints its message with cat <<MSG")
	heredoc, _, ok := strings.Cut(rest, "\nMSG\n")
	require.True(t, ok)
	demoKey := regexp.MustCompile(`(?m)^demo_key=.*$`).FindString(string(script))
	require.NotEmpty(t, demoKey, "run-dev makes the printed key itself")

	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
		w.Header().Set("Idempotent-Replayed", "true")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":"ch_1"}`))
	}))
	defer srv.Close()

	// The message as make run prints it, for this server.
	render := exec.Command(bash, "-c", demoKey+"\n"+"cat <<MSG\n"+heredoc+"\nMSG\n")
	render.Env = []string{"api=" + srv.URL, "key=sk_test_1", "PATH=" + os.Getenv("PATH")}
	render.Env = append(render.Env, "API_ADDR="+strings.TrimPrefix(srv.URL, "http://"))
	msg, err := render.Output()
	require.NoError(t, err)
	_, cmdText, ok := strings.Cut(string(msg), "curl ")
	require.True(t, ok, "the message shows a curl: %s", msg)
	var lines []string
	for _, l := range strings.Split("curl "+cmdText, "\n") {
		lines = append(lines, strings.TrimSpace(l))
		if !strings.HasSuffix(strings.TrimSpace(l), `\`) {
			break
		}
	}
	command := strings.Join(lines, "\n")
	require.NotContains(t, command, "$(", "no command substitution: %s", command)
	require.Regexp(t, `(^|\s)(-i|--include|-D -)(\s|$)`, command, "response headers are shown")

	// Run it with nothing on PATH but curl.
	bin := t.TempDir()
	require.NoError(t, os.Symlink(curl, filepath.Join(bin, "curl")))
	run := exec.Command(bash, "--norc", "-c", command)
	run.Env = []string{"PATH=" + bin}
	out, err := run.CombinedOutput()
	require.NoError(t, err, "%s\n%s", command, out)
	require.Contains(t, string(out), "Idempotent-Replayed: true")
	require.Equal(t, "Bearer sk_test_1", got.Get("Authorization"))
	require.True(t, strings.HasPrefix(got.Get("Idempotency-Key"), "demo-"), got.Get("Idempotency-Key"))
}

// go.mod's go line is a floor every importer of the module inherits, so it
// must be no higher than what the build really needs: the newest go line
// among the modules whose packages the repository compiles (our own code
// uses 1.26 API too, errors.AsType). A go line raised past that, such as a
// patch release copied from the developer's toolchain, fails here.
func TestGoLineIsTheOldestTheModuleNeeds(t *testing.T) {
	t.Parallel()
	gomod, err := os.ReadFile("../go.mod")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	require.NotNil(t, m, "go.mod has a go line")
	declared := string(m[1])

	cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{with .Module}}{{if not .Main}}{{.GoVersion}}{{end}}{{end}}", "./...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	require.NoError(t, err)
	newest := "1.0"
	for _, v := range strings.Fields(string(out)) {
		if semverLess(newest, v) {
			newest = v
		}
	}
	require.False(t, semverLess(declared, newest) || semverLess(newest, declared),
		"go.mod says go %s; the newest go line of the dependencies is %s", declared, newest)
}

// semverLess compares Go versions such as 1.25, 1.25.0 and 1.26.8.
func semverLess(a, b string) bool {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// install-pgbouncer, which make test runs before any test: with PgBouncer
// installed (as on every machine make test ran on) it exits 0 at once,
// installing nothing; PGBOUNCER naming something that is not a binary is a
// one-line refusal.
func TestInstallPgbouncer(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("./install-pgbouncer").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "nothing to install, nothing to say")

	cmd := exec.Command("./install-pgbouncer")
	cmd.Env = append(cmd.Environ(), "PGBOUNCER="+filepath.Join(t.TempDir(), "nothing"))
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	msg := strings.TrimSpace(string(out))
	require.Contains(t, msg, "PGBOUNCER=")
	require.NotContains(t, msg, "\n", "one line")
}

// make run with any of its addresses taken (API_ADDR, MOCKPSP_ADDR,
// CONSOLE_ADDR, REAPER_METRICS_ADDR) stops in under 5 s, before it starts
// anything, with one line naming the port and the variable that moves it.
// It used to say "phasepay is running" while its api crash-looped on
// "address already in use" and another server answered the health check.
func TestRunDevRefusesATakenPort(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	vars := []string{"API_ADDR", "MOCKPSP_ADDR", "CONSOLE_ADDR", "REAPER_METRICS_ADDR"}
	for _, taken := range vars {
		t.Run(taken, func(t *testing.T) {
			t.Parallel()
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer l.Close()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
			_, port, err := net.SplitHostPort(l.Addr().String())
			require.NoError(t, err)

			cmd := exec.Command(bash, "run-dev")
			// No binaries: the check comes before anything is started, so
			// a run that got past it fails otherwise, and not in one line.
			cmd.Env = append(os.Environ(), "BIN_DIR="+filepath.Join(t.TempDir(), "no-bin"), "RUN_DIR="+t.TempDir(),
				"DATABASE_URL=postgres://postgres@127.0.0.1:1/none")
			for _, v := range vars {
				addr := l.Addr().String()
				if v != taken {
					host, p := closedAddr(t)
					addr = host + ":" + p
				}
				cmd.Env = append(cmd.Env, v+"="+addr)
			}
			var stdout, stderr strings.Builder
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			began := time.Now()
			err = cmd.Run()
			took := time.Since(began)
			require.Error(t, err, "run-dev started with %s taken", taken)
			require.Less(t, took, 5*time.Second)
			msg := strings.TrimSpace(stderr.String())
			require.NotContains(t, msg, "\n", "one line: %s", msg)
			require.Contains(t, msg, port)
			require.Contains(t, msg, taken+"=")
			require.Empty(t, stdout.String(), "nothing printed as if it ran")
		})
	}
}

// On a host without apt-get (not Debian), make test stops at its first
// step, at once, with one line naming every tool it lacks and the path
// that works there, make compose-up; on this Debian host it says nothing.
func TestCheckTestHostWithoutApt(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	require.NoError(t, err)
	out, err := exec.Command(bash, "check-test-host").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Empty(t, strings.TrimSpace(string(out)), "with apt-get, nothing to say")

	bin := t.TempDir() // a PATH with bash and nothing else: no apt-get, no docker
	require.NoError(t, os.Symlink(bash, filepath.Join(bin, "bash")))
	none := filepath.Join(t.TempDir(), "none")
	cmd := exec.Command(filepath.Join(bin, "bash"), "check-test-host")
	cmd.Env = []string{"PATH=" + bin, "PGBOUNCER=" + none, "PG_AUTOCTL=" + none, "CHROMIUM=" + none}
	began := time.Now()
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	require.Less(t, time.Since(began), 5*time.Second)
	msg := strings.TrimSpace(string(out))
	require.NotContains(t, msg, "\n", "one line: %s", msg)
	for _, want := range []string{"apt-get", "Debian", "PgBouncer", "pg_autoctl", "Chromium", "make compose-up", "deploy/docker-compose.yml"} {
		require.Contains(t, msg, want)
	}
}

// make build (and so make run) builds every command under cmd/, chargectl
// among them: the docs tell a reader to run bin/chargectl after make run.
func TestMakeBuildBuildsEveryCommand(t *testing.T) {
	t.Parallel()
	mk, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	built := map[string]bool{}
	for _, v := range []string{"BINARIES", "TOOLS"} {
		m := regexp.MustCompile(`(?m)^` + v + ` := (.+)$`).FindSubmatch(mk)
		require.NotNil(t, m, "Makefile has no %s", v)
		for _, b := range strings.Fields(string(m[1])) {
			built[b] = true
		}
	}
	require.Regexp(t, `(?m)^build: \$\(BINARIES\) \$\(TOOLS\)$`, string(mk))
	require.Regexp(t, `(?m)^run: build\b`, string(mk))
	cmds, err := os.ReadDir("../cmd")
	require.NoError(t, err)
	for _, c := range cmds {
		if c.IsDir() {
			require.True(t, built["bin/"+c.Name()], "make build does not build bin/%s", c.Name())
		}
	}
	require.True(t, built["bin/chargectl"])
}
