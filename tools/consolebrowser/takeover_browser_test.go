package consolebrowser_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/consoletest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// A worker killed in the middle of a charge, and the reaper that takes it
// over, as an operator watches them: real api and reaper processes (the
// api SIGKILLed while the PSP call is in flight), a real `api console`,
// and the request's page in a real browser, which must show a lane for
// each of the two holders, the killed api's and the reaper's (their pids),
// and the recovery points in the order the key reached them; the api's
// hold ends at its last heartbeat, where it died, not at the takeover.
func TestTakeoverShowsBothHoldersAndTheRecoveryPointsInOrder(t *testing.T) {
	t.Parallel()
	bin := buildBinaries(t)
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	pool := testdb.Pool(t, dbURL, time.Time{})
	_, apiKey, err := tenants.CreateKey(ctx, pool, "acme")
	require.NoError(t, err)
	// The PSP in the test's process: it outlives the api, as a real PSP
	// would, and answers after 3 s, long enough for a heartbeat (every
	// third of the 2 s lease) and to kill the api inside the call.
	mock, err := mockpsp.New(mockpsp.Faults{LatencyMS: 3000})
	require.NoError(t, err)
	pspSrv := httptest.NewServer(mock)
	t.Cleanup(pspSrv.Close)
	env := []string{"DATABASE_URL=" + dbURL, "PSP_URL=" + pspSrv.URL, "LEASE=2s"}

	apiAddr := freeAddr(t)
	api := startProc(t, bin, "api", append(env, "API_ADDR="+apiAddr), "serve")
	waitHTTP(t, "http://"+apiAddr+"/healthz")
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+apiAddr+"/v1/charges", strings.NewReader(consoletest.Visa))
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", "kill-1")
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil { // the worker dies under it
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool { return len(mock.Requests()) > 0 }, 10*time.Second, 5*time.Millisecond, "the PSP call started")
	require.Eventually(t, func() bool {
		var n int
		_ = pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys, jsonb_array_elements(timeline) e
		                         WHERE key = 'kill-1' AND e->>'kind' = 'heartbeat'`).Scan(&n)
		return n > 0
	}, 10*time.Second, 5*time.Millisecond, "the api's heartbeat renewed its lease during the call")
	api.kill()
	require.NoError(t, mock.SetFaults(mockpsp.Faults{})) // the reaper's calls answer at once

	reaper := startProc(t, bin, "reaper", append(env, "REAPER_INTERVAL=200ms"))
	require.Eventually(t, func() bool {
		var state string
		_ = pool.QueryRow(ctx, `SELECT state FROM idempotency_keys WHERE key = 'kill-1'`).Scan(&state)
		return state == "done"
	}, 20*time.Second, 50*time.Millisecond, "the reaper finished the charge")

	// What the key recorded, to hold the page against.
	tenant, err := tenants.ByName(ctx, pool, "acme")
	require.NoError(t, err)
	h, err := idempotency.ReadHistory(ctx, pool, tenant.ID, "kill-1")
	require.NoError(t, err)
	var points, kinds []string
	for _, e := range h.Entries {
		kinds = append(kinds, string(e.Kind))
		if e.Kind == idempotency.KindReached {
			points = append(points, string(e.RecoveryPoint))
		}
	}
	require.Contains(t, points, "charge_created", "reached by the api before it died")
	require.Equal(t, "finished", kinds[len(kinds)-1], "finished by the reaper")

	// The console, as an operator starts it.
	console := startProc(t, bin, "api", append(env, "CONSOLE_ADDR=127.0.0.1:0", "CONSOLE_TOKEN="+consoletest.Token), "console")
	base := console.waitLine(t, "console: ")
	base = strings.TrimSuffix(strings.TrimPrefix(base, "console: "), "/")

	browser := tab(t, base)
	require.NoError(t, chromedp.Do(browser, chromedp.Navigate(base+"/request?tenant=acme&key=kill-1"),
		chromedp.WaitVisible(chromedp.CSS("#timeline"))))
	holders, err := chromedp.Run(browser, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#timeline g.lane")].map(g => g.dataset.holder).filter(h => h)`))
	require.NoError(t, err)
	require.Len(t, holders, 2, "a lane for each holder: %v", holders)
	require.True(t, strings.HasPrefix(holders[0], "api:") && strings.Contains(holders[0], fmt.Sprintf(":%d:", api.pid)),
		"the killed api first: %v (pid %d)", holders, api.pid)
	require.True(t, strings.HasPrefix(holders[1], "reaper:") && strings.Contains(holders[1], fmt.Sprintf(":%d:", reaper.pid)),
		"then the reaper that took it over: %v (pid %d)", holders, reaper.pid)

	shown, err := chromedp.Run(browser, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#timeline-entries tr[data-kind="reached"] td:last-child')].map(td => td.textContent.split(" · ")[0].replace("reached ", ""))`))
	require.NoError(t, err)
	require.Equal(t, points, shown, "the recovery points, in the order the key reached them")
	rows, err := chromedp.Run(browser, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#timeline-entries tr')].slice(1).map(tr => tr.dataset.kind).filter(k => k !== "event" && k !== "webhook_attempt")`))
	require.NoError(t, err)
	require.Equal(t, kinds, rows, "every entry of the key, in the order it recorded them")
	workers, err := chromedp.Run(browser, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll('#timeline-entries tr[data-kind="taken_over"], #timeline-entries tr[data-kind="claimed"]')].map(tr => tr.dataset.kind + " " + tr.children[2].textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{fmt.Sprintf("claimed api · pid %d", api.pid), fmt.Sprintf("taken_over reaper · pid %d", reaper.pid)}, workers,
		"claimed by the api, taken over by the reaper")
	require.Equal(t, "completed", text(t, browser, "#state"))

	// The api's hold: solid to its last heartbeat, silent from there to
	// the reaper's takeover.
	var beat time.Time
	for _, e := range h.Entries {
		if e.Kind == idempotency.KindHeartbeat {
			beat = e.At
		}
	}
	require.False(t, beat.IsZero(), "the heartbeat is in the key's timeline")
	drawn, err := chromedp.Run(browser, chromedp.Evaluate[[]string](`(() => {
	  const api = document.querySelector('#timeline g.lane[data-holder^="api:"]');
	  const beat = api.querySelector("circle.heartbeat.last"), silent = api.querySelector("rect.silent");
	  const label = [...api.querySelectorAll("text.mark-label")].map(t => t.textContent).find(l => l === "last heartbeat");
	  return [beat ? beat.getAttribute("cx") : "", silent ? silent.getAttribute("x") : "", label || "",
	          String([...document.querySelectorAll('#timeline-entries tr[data-kind="heartbeat"]')].length)];
	})()`))
	require.NoError(t, err)
	require.Equal(t, "last heartbeat", drawn[2], "the api's last heartbeat is labelled: %v", drawn)
	require.NotEmpty(t, drawn[0])
	require.Equal(t, drawn[0], drawn[1], "the silent span starts at the last heartbeat")
	require.Equal(t, "1", drawn[3], "one row for the run of heartbeats")
}

// The binaries, built once for the package's tests, as make build builds
// them.
var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

func buildBinaries(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "phasepay-console-bin-")
		if buildErr != nil {
			return
		}
		// Both at once: most of a build is linking, one core each.
		var (
			wg   sync.WaitGroup
			errs [2]error
		)
		for i, name := range []string{"api", "reaper"} {
			wg.Go(func() {
				// At the repository's root: the service's module builds them.
				cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, name), "./cmd/"+name)
				cmd.Dir = filepath.Join("..", "..")
				out, err := cmd.CombinedOutput()
				if err != nil {
					errs[i] = fmt.Errorf("build %s: %w\n%s", name, err, out)
				}
			})
		}
		wg.Wait()
		buildErr = errors.Join(errs[:]...)
	})
	require.NoError(t, buildErr)
	return binDir
}

// proc is a running binary: its output kept for the test's log, its
// stdout read line by line.
type proc struct {
	cmd   *exec.Cmd
	pid   int
	done  chan struct{}
	mu    sync.Mutex
	out   bytes.Buffer
	lines chan string
}

func startProc(t *testing.T, dir, name string, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &proc{cmd: cmd, done: make(chan struct{}), lines: make(chan string, 16)}
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = writerFunc(func(b []byte) (int, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.out.Write(b)
	})
	require.NoError(t, cmd.Start())
	p.pid = cmd.Process.Pid
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			p.mu.Lock()
			t.Logf("--- %s %s output:\n%s", name, strings.Join(args, " "), p.out.String())
			p.mu.Unlock()
		}
	})
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// waitLine returns the first line of stdout that starts with prefix.
func (p *proc) waitLine(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if strings.HasPrefix(l, prefix) {
				return l
			}
		case <-p.done:
			t.Fatalf("exited before printing %q", prefix)
		case <-deadline:
			t.Fatalf("no line %q within 15s", prefix)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func waitHTTP(t *testing.T, u string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := http.Get(u)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 15*time.Second, 20*time.Millisecond, "%s answers", u)
}
