package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// The foreign keys to tenants made every new key and charge lock the one
// tenant row FOR KEY SHARE, which all of a tenant's concurrent requests
// share, as MultiXacts. A transaction that has inserted a key and a charge
// holds no lock on its tenant's row: another may lock it FOR UPDATE
// without waiting.
func TestNewChargeLocksNoTenantRow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	var tenant int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	var createdAt any
	require.NoError(t, tx.QueryRow(ctx, `
		INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body)
		VALUES ($1, 'k', sha256('x'), 'POST', '/v1/charges', '{}') RETURNING created_at`, tenant).Scan(&createdAt))
	_, err = tx.Exec(ctx, `
		INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at, amount, currency, payment_method, status)
		VALUES ($1, 'ch_1', 'k', $2, 100, 'usd', 'pm_card_visa', 'pending')`, tenant, createdAt)
	require.NoError(t, err)

	err = pgx.BeginFunc(ctx, pool, func(other pgx.Tx) error {
		_, err := other.Exec(ctx, `SELECT 1 FROM tenants WHERE id = $1 FOR UPDATE NOWAIT`, tenant)
		return err
	})
	require.NoError(t, err, "the inserts locked the tenant's row")
}

// Without the foreign keys, a tenant that went away would leave its keys
// and charges pointing at nothing: deleting or truncating tenants is
// refused.
func TestTenantCannotBeDeleted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	var tenant int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))

	for _, stmt := range []string{`DELETE FROM tenants WHERE id = $1`, `TRUNCATE tenants CASCADE`} {
		var args []any
		if stmt[0] == 'D' {
			args = append(args, tenant)
		}
		_, err := pool.Exec(ctx, stmt, args...)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, stmt)
		require.Equal(t, "23001", pgErr.Code, stmt) // restrict_violation
	}
	_, err := pool.Exec(ctx, `UPDATE tenants SET id = id + 1000 WHERE id = $1`, tenant)
	require.Error(t, err, "an id that changes would orphan its rows")
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE id = $1`, tenant).Scan(&n))
	require.Equal(t, 1, n)
}
