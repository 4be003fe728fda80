package tenants_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// countingDB counts the lookups that reach the database.
type countingDB struct {
	tenants.DBTX
	n atomic.Int64
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.DBTX.QueryRow(ctx, sql, args...)
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return c.DBTX.Exec(ctx, sql, args...)
}

func TestKeysStoreOnlyHashAndAuthenticate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	tenant, secret, err := tenants.CreateKey(ctx, pool, "acme")
	require.NoError(t, err)
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM api_keys WHERE position($1::bytea in key_hash) > 0`, []byte(secret)).Scan(&n))
	require.Zero(t, n)

	got, err := tenants.Authenticate(ctx, pool, secret)
	require.NoError(t, err)
	require.Equal(t, tenant, got)
	for _, bad := range []string{"", "sk_", secret + "x", "Bearer " + secret} {
		_, err := tenants.Authenticate(ctx, pool, bad)
		require.ErrorIs(t, err, tenants.ErrUnauthorized, bad)
	}

	// Same tenant name: same tenant, a second key.
	again, secret2, err := tenants.CreateKey(ctx, pool, "acme")
	require.NoError(t, err)
	require.Equal(t, tenant.ID, again.ID)
	require.NotEqual(t, secret, secret2)
}

func TestAuthenticatorCachesKnownKeysOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	_, secret, err := tenants.CreateKey(ctx, pool, "acme")
	require.NoError(t, err)

	db := &countingDB{DBTX: pool}
	a := tenants.NewAuthenticator(db, time.Minute)
	for range 5 {
		_, err := a.Authenticate(ctx, secret)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, db.n.Load(), "a known key is looked up once per TTL")
	for range 3 {
		_, err := a.Authenticate(ctx, "sk_unknown")
		require.ErrorIs(t, err, tenants.ErrUnauthorized)
	}
	require.EqualValues(t, 4, db.n.Load(), "unknown keys are not cached")
}
