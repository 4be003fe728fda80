package charges_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/migrations"
)

// The database lost after the PSP answered: the request answered 500 and
// the key stayed leased for a whole lease (60 s of 409s after the database
// was back). Now the request fails fast as "database unavailable" (503
// database_unavailable with Retry-After in the api), the run releases its
// lease as soon as the database answers again, and the client's retry
// resumes the charge without losing the PSP's answer: one authorization.
// The release is not an attempt (the pitfall of a database blip taken for
// a PSP failure): the PSP did not fail, so the retry is due at once, not told 503
// psp_unavailable until a schedule allows.
func TestDatabaseLostAfterPSPAnsweredKeepsNoLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := pgcluster.ForTest(t, pgcluster.Config{})
	url, err := c.CreateDatabase(ctx, "phasepay")
	require.NoError(t, err)
	require.NoError(t, migrations.UpURL(ctx, url))
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	dbpool.ConfigurePool(cfg, url)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var tenant int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))

	// The PSP authorizes, and the database stops before its answer is back.
	mock, err := mockpsp.New(mockpsp.Faults{})
	require.NoError(t, err)
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/v1/authorizations") {
			mock.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		mock.ServeHTTP(rec, r)
		once.Do(func() { require.NoError(t, c.Stop()) })
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	t.Cleanup(srv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: srv.URL})
	require.NoError(t, err)
	keys, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute, RetryBase: 200 * time.Millisecond})
	require.NoError(t, err)
	svc := chargestest.NewService(t, pool, keys, client, phases.Config{})
	t.Cleanup(svc.Wait)

	req, _ := chargestest.Request(t, `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`)
	start := time.Now()
	_, err = svc.Create(ctx, tenant, "k", phases.Parsed(req))
	require.Error(t, err)
	require.True(t, dbstate.Unavailable(err), "%v", err)
	require.Less(t, time.Since(start), 5*time.Second, "no request hangs on a dead database")

	// sleep: the database stays away a while, as in a restart; its release's retries signal nothing.
	time.Sleep(time.Second)
	require.NoError(t, c.Start(ctx))
	released := time.Now()
	var rec idempotency.Record
	require.Eventually(t, func() bool {
		rec, err = keys.Lookup(ctx, pool, tenant, "k")
		return err == nil && !rec.Leased
	}, 10*time.Second, 50*time.Millisecond, "the key stayed leased after the database came back")
	t.Logf("lease released %s after the database came back", time.Since(released).Round(time.Millisecond))
	require.Equal(t, idempotency.StateStarted, rec.State)
	require.Equal(t, charges.PointChargeCreated, rec.Point)
	// A database blip is not a PSP attempt: the PSP answered, so nothing is
	// counted or scheduled, and the client is not told the PSP is away.
	require.Zero(t, rec.Attempts, "the release counted an attempt")
	require.Empty(t, rec.LastError)
	require.True(t, rec.Due, "the release scheduled the next attempt later")

	// The client's next retry resumes it at once.
	res, err := svc.Create(ctx, tenant, "k", phases.Parsed(req))
	require.NoError(t, err, "the retry after the database came back was not resumed")
	require.Equal(t, http.StatusCreated, res.Response.Status)
	var charge struct{ ID string }
	require.NoError(t, json.Unmarshal(res.Response.Body, &charge))
	n := 0
	for _, a := range mock.Authorizations() {
		if a.Reference == charge.ID {
			n++
		}
	}
	require.Equal(t, 1, n, "authorizations for %s", charge.ID)
}
