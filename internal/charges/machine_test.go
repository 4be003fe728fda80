package charges_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// pgxpool's health checker and net/http's idle connections outlive
		// a test by a tick; they belong to pools and clients the tests close.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

var errCrash = errors.New("simulated crash")

type testBundle struct {
	url    string
	pool   *pgxpool.Pool
	keys   *idempotency.Store
	mock   *psp.Mock
	psp    *psp.Client
	tenant int64
	t0     time.Time
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url := testdb.NewURL(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	pool := testdb.Pool(t, url, t0)
	keys, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute})
	require.NoError(t, err)
	mock, err := psp.NewMock(psp.Faults{})
	require.NoError(t, err)
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: srv.URL, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	require.NoError(t, err)
	var tenant int64
	require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))
	return &testBundle{url: url, pool: pool, keys: keys, mock: mock, psp: client, tenant: tenant, t0: t0}
}

// service returns a worker whose database clock stands at the given offset
// from t0: a later worker sees earlier workers' leases expired.
func (b *testBundle) service(t *testing.T, offset time.Duration, cfg charges.Config) *charges.Service {
	t.Helper()
	pool := b.pool
	if offset != 0 {
		pool = testdb.Pool(t, b.url, b.t0.Add(offset))
	}
	return newService(t, pool, b.keys, b.psp, cfg)
}

func request(t *testing.T, body string) (idempotency.Canonical, charges.CreateParams) {
	t.Helper()
	req, err := idempotency.Canonicalize("POST", charges.Path, []byte(body))
	require.NoError(t, err)
	params, err := charges.ParseCreateParams([]byte(body))
	require.NoError(t, err)
	return req, params
}

const visa = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

func (b *testBundle) chargeCount(t *testing.T, key string) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM charges WHERE tenant_id = $1 AND idempotency_key = $2`, b.tenant, key).Scan(&n))
	return n
}

func (b *testBundle) keyState(t *testing.T, key string) (state, point string, lockVersion int64) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT state, recovery_point, lock_version FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
		b.tenant, key).Scan(&state, &point, &lockVersion))
	return state, point, lockVersion
}

// commitCounter counts the transactions a pool commits.
type commitCounter struct {
	mu sync.Mutex
	n  int
}

func (c *commitCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if strings.EqualFold(strings.TrimSpace(data.SQL), "commit") {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
	}
	return ctx
}

func (c *commitCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *commitCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// The claim must commit before the PSP call, and the local arrows around it
// fold into the two transactions; with OneCommitPerPhase every arrow commits.
func TestCommitsPerNewCharge(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  charges.Config
		want int
	}{
		{charges.Config{}, 2},
		{charges.Config{OneCommitPerPhase: true}, 4},
	} {
		t.Run(fmt.Sprint(tt.want), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			counter := &commitCounter{}
			pool := testdb.Pool(t, b.url, b.t0, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
			svc := newService(t, pool, b.keys, b.psp, tt.cfg)

			req, params := request(t, visa)
			res, err := svc.Create(ctx, b.tenant, "commits", req, params)
			require.NoError(t, err)
			require.Equal(t, 201, res.Response.Status)
			require.Equal(t, tt.want, counter.count())

			state, point, lv := b.keyState(t, "commits")
			require.Equal(t, "done", state)
			require.Equal(t, "done", point)
			require.EqualValues(t, 1, lv)

			// A replay is a plain read: no transaction at all.
			res, err = svc.Create(ctx, b.tenant, "commits", req, params)
			require.NoError(t, err)
			require.Equal(t, charges.OutcomeReplay, res.Outcome)
			require.Equal(t, tt.want, counter.count())
		})
	}
}

func newService(t *testing.T, pool *pgxpool.Pool, keys *idempotency.Store, a charges.Authorizer, cfg charges.Config) *charges.Service {
	t.Helper()
	svc, err := charges.NewService(pool, keys, a, cfg)
	require.NoError(t, err)
	return svc
}
