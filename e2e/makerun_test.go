package e2e_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// runDev is scripts/run-dev (make run) running as its own process group.
type runDev struct {
	t    *testing.T
	cmd  *exec.Cmd
	out  *syncBuffer // stdout and stderr: what a developer's terminal shows
	done chan struct{}
}

func startRunDev(t *testing.T, env map[string]string) *runDev {
	t.Helper()
	cmd := exec.Command("bash", "../scripts/run-dev")
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r := &runDev{t: t, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	require.NoError(t, cmd.Start())
	go func() { _ = cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-r.done
		if t.Failed() {
			t.Logf("--- run-dev output:\n%s", r.out.String())
		}
	})
	require.Eventually(t, func() bool { return strings.Contains(r.out.String(), "Ctrl-C stops everything") },
		60*time.Second, 50*time.Millisecond, "run-dev never printed its message")
	return r
}

// stop is Ctrl-C's cleanup: SIGTERM to the script, which stops the rest.
func (r *runDev) stop() {
	r.t.Helper()
	require.NoError(r.t, r.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-r.done:
	case <-time.After(40 * time.Second):
		r.t.Fatal("run-dev did not stop on SIGTERM")
	}
}

func (r *runDev) find(pattern string) string {
	r.t.Helper()
	m := regexp.MustCompile(pattern).FindStringSubmatch(r.out.String())
	require.NotNil(r.t, m, "%s in:\n%s", pattern, r.out.String())
	return m[1]
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, b)
	return string(b)
}

func putFaults(t *testing.T, pspURL, faults string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, pspURL+"/_admin/faults", strings.NewReader(faults))
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// The README's tour, "watch a takeover", through make run's script: the
// mock PSP is a process of its own, the reaper serves its metrics, a
// local webhook listener is accepted, and the printed lines say what an
// operator's shell needs. A charge whose api is killed mid-call is taken
// over by the reaper (logged at INFO), authorized once at the PSP, whose
// memory outlived the api; the api comes back by itself; the request's
// timeline shows both holders, and show-trace the reaper's trace, linked
// to the dead api's. A second run reuses the dev key.
func TestMakeRunShowsATakeover(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)
	runDir := t.TempDir()
	apiAddr, pspAddr, metricsAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	env := map[string]string{
		"DATABASE_URL": dbURL, "API_ADDR": apiAddr, "MOCKPSP_ADDR": pspAddr, "REAPER_METRICS_ADDR": metricsAddr,
		"CONSOLE_ADDR": freeAddr(t), "LEASE": "2s", "BIN_DIR": binDir, "RUN_DIR": runDir,
	}
	dev := startRunDev(t, env)
	api, psp := "http://"+apiAddr, "http://"+pspAddr
	key := dev.find(`dev API key \(tenant dev\): (\S+)`)
	require.Contains(t, dev.out.String(), "export DATABASE_URL='"+dbURL+"' PSP_URL="+psp)
	require.Contains(t, dev.out.String(), "Operator console: ")
	require.Contains(t, getBody(t, "http://"+metricsAddr+"/metrics"), "phasepay_reaper_takeovers")

	// Webhooks to a listener on this machine: allowed in development.
	req, err := http.NewRequest(http.MethodPost, api+"/v1/webhook_endpoints",
		strings.NewReader(`{"url":"http://127.0.0.1:9/hooks","events":["*"]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	// A slow charge; the api is killed while the PSP works on it.
	putFaults(t, psp, `{"latency_ms": 3000}`)
	charged := make(chan error, 1)
	go func() {
		_, err := post(context.Background(), api, key, "tour-1", visa)
		charged <- err
	}()
	require.Eventually(t, func() bool { return strings.Contains(getBody(t, psp+"/_admin/requests"), `"POST"`) },
		10*time.Second, 20*time.Millisecond, "the charge never reached the PSP")
	pid, err := os.ReadFile(filepath.Join(runDir, "api.pid"))
	require.NoError(t, err)
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(n, syscall.SIGKILL))
	require.Error(t, <-charged, "the client lost its api")
	putFaults(t, psp, `{}`)

	// The reaper finishes it, once the lease ran out.
	cli := map[string]string{"DATABASE_URL": dbURL, "PSP_URL": psp}
	var shown struct {
		State    string `json:"state"`
		TraceID  string `json:"trace_id"`
		Timeline []struct {
			Kind   string `json:"kind"`
			Holder string `json:"holder"`
			By     string `json:"by"`
		} `json:"timeline"`
	}
	require.Eventually(t, func() bool {
		require.NoError(t, json.Unmarshal([]byte(runCmd(t, "api", cli, "requests", "show", "dev", "tour-1", "--json")), &shown))
		return shown.State == "completed"
	}, 30*time.Second, 200*time.Millisecond, "the reaper never finished the charge")
	var holders []string // roles in turn
	for _, e := range shown.Timeline {
		role, _, _ := strings.Cut(e.Holder, ":")
		if role != "" && (len(holders) == 0 || holders[len(holders)-1] != role) {
			holders = append(holders, role)
		}
		if e.Kind == "taken_over" {
			require.Equal(t, "reaper", e.By)
		}
	}
	require.Equal(t, []string{"api", "reaper"}, holders, "the api claimed it, the reaper took it over and finished it")
	readable := runCmd(t, "api", cli, "requests", "show", "dev", "tour-1")
	require.Contains(t, readable, "took the key over: by the reaper")
	require.Contains(t, readable, "trace           "+shown.TraceID)

	out := dev.out.String()
	require.Contains(t, out, "the api exited")
	require.Contains(t, out, `"msg":"reaper took over request"`)
	require.Contains(t, out, `"msg":"reaper completed request"`)
	waitHealthy(t, api) // back by itself
	auths := ledger(t, psp)
	require.Len(t, auths, 1, "the PSP's memory outlived the api: one authorization, found by lookup")

	dev.stop()
	trace := exec.Command("../scripts/show-trace", shown.TraceID)
	files, err := filepath.Glob(filepath.Join(runDir, "spans", "*.json"))
	require.NoError(t, err)
	trace.Args = append(trace.Args, files...)
	traced, err := trace.CombinedOutput()
	require.NoError(t, err, "%s", traced)
	require.Contains(t, string(traced), "linked to "+shown.TraceID)
	require.Contains(t, string(traced), "charges.create.resume")
	require.Contains(t, string(traced), "phasepay.key_hash=")

	// The next run keeps the key.
	again := startRunDev(t, env)
	require.Equal(t, key, again.find(`dev API key \(tenant dev\): (\S+)`))
	again.stop()
}
