package bench

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// The database's CPU of a load is that of the server processes that did
// its work, counted per answered request, and never more than the
// machine's.
func TestCostedCountsTheDatabaseWorkOfALoad(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	e := &env{pool: testdb.Pool(t, url, time.Time{})}
	work := testdb.Pool(t, url, time.Time{}) // the server under test's own pool
	require.NoError(t, work.Ping(ctx))

	r := e.costed(ctx, func() LoadResult {
		for range 50 {
			_, err := work.Exec(ctx, `SELECT count(*) FROM generate_series(1, 200000)`)
			require.NoError(t, err)
		}
		return LoadResult{Requests: 50}
	})
	require.NotNil(t, r.CPU)
	require.Greater(t, r.CPU.Database, 0.0, "50 counts of 200,000 rows cost the database CPU")
	require.GreaterOrEqual(t, r.CPU.Machine, r.CPU.Database)

	idle := e.costed(ctx, func() LoadResult { return LoadResult{} })
	require.Nil(t, idle.CPU, "no request answered: no cost per request")
}

func TestCPUCeilingPutsPhasepaysDatabaseInTheBaseline(t *testing.T) {
	t.Parallel()
	bare := &CPUCost{Machine: 1.0, Database: 0.3}
	require.InDelta(t, 1.0/(0.7+1.3), CPUCeiling(&CPUCost{Machine: 2.5, Database: 1.3}, bare), 1e-9)
	require.InDelta(t, 1.0, CPUCeiling(&CPUCost{Machine: 2.5, Database: 0.3}, bare), 1e-9,
		"the same database work: nothing but the rest stands between them")
	require.Zero(t, CPUCeiling(nil, bare))
}
