package tenants_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// queryCounter counts the name lookups that reach the database.
type queryCounter struct {
	tenants.DBTX
	n atomic.Int64
}

func (c *queryCounter) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n.Add(1)
	return c.DBTX.Query(ctx, sql, args...)
}

// A log line names a tenant by its name, read once; a tenant whose name
// cannot be read is logged by its id under tenant_id, never under tenant.
func TestNameCacheNamesTenantsInLogLines(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	acme, _, err := tenants.CreateKey(ctx, pool, "acme")
	require.NoError(t, err)
	db := &queryCounter{DBTX: pool}
	names := tenants.NewNameCache(db)

	for range 3 {
		attr := names.Attr(ctx, acme.ID)
		require.Equal(t, "tenant", attr.Key)
		require.Equal(t, "acme", attr.Value.String())
	}
	require.EqualValues(t, 1, db.n.Load(), "read once")

	attr := names.Attr(ctx, acme.ID+1000)
	require.Equal(t, "tenant_id", attr.Key)
	require.Equal(t, acme.ID+1000, attr.Value.Int64())
}
