// Package e2e_test runs the real binaries as separate processes and kills,
// pauses and stops them: the crash cases of the contract, observed from the
// outside (HTTP, the PSP's ledger and the database).
package e2e_test

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

const visa = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

type cluster struct {
	t      *testing.T
	dbURL  string
	pool   *pgxpool.Pool
	pspURL string
	apiKey string
}

// newCluster starts a mock PSP whose every answer takes latency, on a fresh
// database with a tenant key.
func newCluster(t *testing.T, latency time.Duration) *cluster {
	t.Helper()
	dbURL := testdb.NewURL(t)
	pspAddr := freeAddr(t)
	start(t, "mockpsp", map[string]string{"MOCKPSP_ADDR": pspAddr, "MOCKPSP_LATENCY": latency.String()})
	c := &cluster{t: t, dbURL: dbURL, pool: testdb.Pool(t, dbURL, time.Time{}), pspURL: "http://" + pspAddr}
	require.Eventually(t, func() bool {
		resp, err := http.Get(c.pspURL + "/_admin/authorizations")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	c.apiKey = runCmd(t, "api", c.env(nil), "keys", "create", "--tenant", "e2e")
	return c
}

func (c *cluster) env(extra map[string]string) map[string]string {
	env := map[string]string{"DATABASE_URL": c.dbURL, "PSP_URL": c.pspURL, "LEASE": "2s"}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

func (c *cluster) startAPI() (*proc, string) {
	addr := freeAddr(c.t)
	p := start(c.t, "api", c.env(map[string]string{"API_ADDR": addr}), "serve")
	base := "http://" + addr
	waitHealthy(c.t, base)
	return p, base
}

func (c *cluster) keyState(key string) (state, point string, lockVersion int64) {
	c.t.Helper()
	require.NoError(c.t, c.pool.QueryRow(context.Background(),
		`SELECT state, recovery_point, lock_version FROM idempotency_keys WHERE key = $1`, key).Scan(&state, &point, &lockVersion))
	return state, point, lockVersion
}

func (c *cluster) charges(key string) []string {
	c.t.Helper()
	rows, err := c.pool.Query(context.Background(), `SELECT id FROM charges WHERE idempotency_key = $1`, key)
	require.NoError(c.t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(c.t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(c.t, rows.Err())
	return ids
}

// waitForAuthorization waits until the PSP has received n authorization
// requests: the worker is now inside its PSP call.
func (c *cluster) waitForAuthorization(n int) {
	c.t.Helper()
	require.Eventually(c.t, func() bool { return len(ledger(c.t, c.pspURL)) >= n }, 10*time.Second, 5*time.Millisecond)
}

// SIGKILL during the PSP call, then nobody retries: the reaper alone takes
// the key over once the lease ran out and completes it, with the PSP's first
// answer; the client's eventual retry is a replay.
func TestKilledDuringPSPCallIsCompletedByReaper(t *testing.T) {
	t.Parallel()
	c := newCluster(t, 1500*time.Millisecond)
	api, base := c.startAPI()

	go post(context.Background(), base, c.apiKey, "kill-1", visa) //nolint:errcheck // the worker dies under it
	c.waitForAuthorization(1)
	api.kill()
	state, point, _ := c.keyState("kill-1")
	require.Equal(t, "started", state)
	require.Equal(t, "charge_created", point)

	reaper := start(t, "reaper", c.env(map[string]string{"REAPER_INTERVAL": "200ms"}))
	require.Eventually(t, func() bool {
		state, _, _ := c.keyState("kill-1")
		return state == "done"
	}, 20*time.Second, 50*time.Millisecond)
	reaper.stop()

	ids := c.charges("kill-1")
	require.Len(t, ids, 1)
	entries := ledger(t, c.pspURL)
	require.Len(t, entries, 1)
	require.Equal(t, ids[0], entries[0].Reference)
	require.Equal(t, ids[0]+":authorize", entries[0].IdempotencyKey)
	require.Equal(t, 1, entries[0].Attempts, "the reaper looked the charge up by reference and found it: nothing sent again")

	_, base = c.startAPI()
	resp, err := post(context.Background(), base, c.apiKey, "kill-1", visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.status, string(resp.body))
	require.Equal(t, "true", resp.header.Get("Idempotent-Replayed"))
	require.Contains(t, string(resp.body), ids[0])
}

// A worker frozen (SIGSTOP) in its PSP call past its lease; a retry on
// another worker takes over and finishes. Thawed, the first worker's commit
// matches no row: it must not answer its client with anything but the
// stored response (or a 409), and nothing is charged twice.
func TestPausedWorkerIsFencedAfterTakeover(t *testing.T) {
	t.Parallel()
	c := newCluster(t, time.Second)
	apiA, baseA := c.startAPI()
	_, baseB := c.startAPI()

	type result struct {
		resp response
		err  error
	}
	first := make(chan result, 1)
	go func() {
		resp, err := post(context.Background(), baseA, c.apiKey, "pause-1", visa)
		first <- result{resp, err}
	}()
	c.waitForAuthorization(1)
	apiA.signal(syscall.SIGSTOP)
	time.Sleep(2500 * time.Millisecond) // past the 2s lease

	resp, err := post(context.Background(), baseB, c.apiKey, "pause-1", visa)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.status, string(resp.body))
	_, _, lv := c.keyState("pause-1")
	require.EqualValues(t, 2, lv, "B took the key over")

	apiA.signal(syscall.SIGCONT)
	stale := <-first
	require.NoError(t, stale.err)
	switch stale.resp.status {
	case http.StatusCreated:
		require.Equal(t, string(resp.body), string(stale.resp.body), "the fenced worker answered with a response of its own")
	case http.StatusConflict:
	default:
		t.Fatalf("fenced worker answered %d: %s", stale.resp.status, stale.resp.body)
	}

	state, _, lv := c.keyState("pause-1")
	require.Equal(t, "done", state)
	require.EqualValues(t, 2, lv)
	require.Len(t, c.charges("pause-1"), 1)
	require.Len(t, ledger(t, c.pspURL), 1)
	require.Contains(t, apiA.out.String(), "lease lost to a takeover")
}

// SIGTERM lets a request in flight finish, then the process exits 0.
func TestSigtermFinishesInFlightRequest(t *testing.T) {
	t.Parallel()
	c := newCluster(t, time.Second)
	api, base := c.startAPI()

	type result struct {
		resp response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := post(context.Background(), base, c.apiKey, "term-1", visa)
		done <- result{resp, err}
	}()
	c.waitForAuthorization(1)
	api.stop()
	r := <-done
	require.NoError(t, r.err)
	resp := r.resp
	require.Equal(t, http.StatusCreated, resp.status, string(resp.body))
	state, _, _ := c.keyState("term-1")
	require.Equal(t, "done", state)
}
