// Package chargestest sets up what tests of the charge state machine, and
// of what drives it (the reaper), need: a fresh database with a tenant, a
// key store, a mock PSP behind the real client, and workers whose database
// clocks stand wherever a test needs them.
package chargestest

import (
	"cmp"
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Bundle is one test's world.
type Bundle struct {
	URL  string
	Pool *pgxpool.Pool // database clock at T0
	Keys *idempotency.Store
	Mock *mockpsp.Mock
	PSP  *psp.Client
	// Tenant owns every key the test makes.
	Tenant int64
	// T0 is the database clock of Pool: now, to the second.
	T0 time.Time
}

// Setup builds a Bundle. keys defaults to a one-minute lease.
func Setup(t *testing.T, keys idempotency.Config) *Bundle {
	t.Helper()
	keys.Lease = cmp.Or(keys.Lease, time.Minute)
	if keys.NeedsAttention == nil {
		keys.NeedsAttention = events.NeedsAttention // as the api and the reaper set it
	}
	url := testdb.NewURL(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	pool := testdb.Pool(t, url, t0)
	store, err := idempotency.NewStore(keys)
	require.NoError(t, err)
	mock, err := mockpsp.New(mockpsp.Faults{})
	require.NoError(t, err)
	srv := httptest.NewServer(mock)
	t.Cleanup(srv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: srv.URL, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	require.NoError(t, err)
	var tenant int64
	require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))
	return &Bundle{URL: url, Pool: pool, Keys: store, Mock: mock, PSP: client, Tenant: tenant, T0: t0}
}

// PoolAt returns a pool whose database clock stands at T0+offset: a later
// worker sees earlier workers' leases expired.
func (b *Bundle) PoolAt(t *testing.T, offset time.Duration) *pgxpool.Pool {
	t.Helper()
	if offset == 0 {
		return b.Pool
	}
	return testdb.Pool(t, b.URL, b.T0.Add(offset))
}

// Service returns a worker on PoolAt(offset).
func (b *Bundle) Service(t *testing.T, offset time.Duration, cfg phases.Config) *charges.Service {
	t.Helper()
	return NewService(t, b.PoolAt(t, offset), b.Keys, b.PSP, cfg)
}

// NewService is charges.NewService, failing the test on error.
func NewService(t *testing.T, pool *pgxpool.Pool, keys *idempotency.Store, a charges.Authorizer, cfg phases.Config) *charges.Service {
	t.Helper()
	svc, err := charges.NewService(pool, keys, a, cfg)
	require.NoError(t, err)
	return svc
}

// Request returns a charge request body's fingerprinted form and params.
func Request(t *testing.T, body string) (idempotency.Canonical, charges.CreateParams) {
	t.Helper()
	req, params, err := charges.ParseCreateRequest([]byte(body))
	require.NoError(t, err)
	return req, params
}

// ChargeIDs returns the ids of the charges of a key.
func (b *Bundle) ChargeIDs(t *testing.T, key string) []string {
	t.Helper()
	rows, err := b.Pool.Query(context.Background(),
		`SELECT id FROM charges WHERE tenant_id = $1 AND idempotency_key = $2`, b.Tenant, key)
	require.NoError(t, err)
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// KeyState returns a key's state, recovery point and fencing token.
func (b *Bundle) KeyState(t *testing.T, key string) (state, point string, lockVersion int64) {
	t.Helper()
	require.NoError(t, b.Pool.QueryRow(context.Background(),
		`SELECT state, recovery_point, lock_version FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
		b.Tenant, key).Scan(&state, &point, &lockVersion))
	return state, point, lockVersion
}

// AuthorizationsFor returns the PSP's ledger entries for a charge.
func (b *Bundle) AuthorizationsFor(chargeID string) []mockpsp.LedgerEntry {
	var out []mockpsp.LedgerEntry
	for _, a := range b.Mock.Authorizations() {
		if a.Reference == chargeID {
			out = append(out, a)
		}
	}
	return out
}
