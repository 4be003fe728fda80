package tenants

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// A process that meets more tenants than the cache holds keeps at most
// that many names, and still names every tenant.
func TestNameCacheIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	names := NewNameCache(pool)
	names.max = 3
	require.Equal(t, MaxNames, NewNameCache(pool).max)

	for i := range 7 {
		name := fmt.Sprintf("tenant-%d", i)
		tenant, _, err := CreateKey(ctx, pool, name)
		require.NoError(t, err)
		require.Equal(t, name, names.Name(ctx, tenant.ID))
		names.mu.Lock()
		n := len(names.names)
		names.mu.Unlock()
		require.LessOrEqual(t, n, 3)
	}
}
