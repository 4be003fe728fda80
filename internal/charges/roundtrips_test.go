package charges_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// tripCounter counts database round trips as they cross the wire: the
// times a connection writes after the server has answered it since its
// last write. A pipelined exchange (BEGIN, statements, COMMIT in one
// write) is one; a BEGIN sent and waited for is one more. It wraps the
// pool's connections below pgx, so it counts what was sent, whatever the
// code believes it sends (as tools/bench's wireCounter does for make
// bench).
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) configure(cfg *pgxpool.Config) {
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: conn, trips: &c.n}, nil
	}
}

type countedConn struct {
	net.Conn
	trips    *atomic.Int64
	answered atomic.Bool // the server wrote since our last write
}

func (c *countedConn) Write(b []byte) (int, error) {
	if c.answered.Swap(false) {
		c.trips.Add(1)
	}
	return c.Conn.Write(b)
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.answered.Store(true)
	}
	return n, err
}

// roundTrips creates n new charges one at a time on a service whose pool
// counts its round trips, after a warm-up (connections, prepared
// statements), then replays each once on that service and once on another
// (a process that has not seen the keys: see phases.keyHints), and returns
// the round trips per new charge and per replay of each kind.
func roundTrips(t *testing.T, cfg phases.Config, n int) (perNew, perReplay, perColdReplay float64) {
	t.Helper()
	ctx := context.Background()
	b := setup(t)
	counter := &tripCounter{}
	pool := testdb.Pool(t, b.URL, b.T0, counter.configure)
	svc := chargestest.NewService(t, pool, b.Keys, b.PSP, cfg)
	cold := chargestest.NewService(t, pool, b.Keys, b.PSP, cfg)
	req, _ := chargestest.Request(t, visa)
	create := func(key string, want phases.Outcome) {
		t.Helper()
		res, err := svc.Create(ctx, b.Tenant, key, phases.Parsed(req))
		require.NoError(t, err)
		require.Equal(t, 201, res.Response.Status)
		require.Equal(t, want, res.Outcome)
	}
	replayCold := func(key string) {
		t.Helper()
		res, err := cold.Create(ctx, b.Tenant, key, phases.Parsed(req))
		require.NoError(t, err)
		require.Equal(t, 201, res.Response.Status)
		require.Equal(t, phases.OutcomeReplay, res.Outcome)
	}
	for i := range 3 {
		create(fmt.Sprintf("warm-%d", i), phases.OutcomeNew)
		create(fmt.Sprintf("warm-%d", i), phases.OutcomeReplay)
		replayCold(fmt.Sprintf("warm-%d", i))
	}
	t0 := counter.n.Load()
	for i := range n {
		create(fmt.Sprintf("rt-%d", i), phases.OutcomeNew)
	}
	t1 := counter.n.Load()
	for i := range n {
		create(fmt.Sprintf("rt-%d", i), phases.OutcomeReplay)
	}
	t2 := counter.n.Load()
	for i := range n {
		replayCold(fmt.Sprintf("rt-%d", i))
	}
	t3 := counter.n.Load()
	perNew, perReplay, perColdReplay = float64(t1-t0)/float64(n), float64(t2-t1)/float64(n), float64(t3-t2)/float64(n)
	t.Logf("round trips: %.2f per new charge, %.2f per replay, %.2f per replay in another process (one commit per phase: %v)",
		perNew, perReplay, perColdReplay, cfg.OneCommitPerPhase)
	return perNew, perReplay, perColdReplay
}

// A new charge is two commits, the claim's and the one after the PSP call,
// each one pipelined exchange with the database (BEGIN, statements and
// COMMIT together), plus at most one for a read a transaction cannot go on
// without. It used to be about ten: a lookup that always missed, and a
// BEGIN, a COMMIT and each statement on their own.
func TestNewChargeCostsAtMostThreeRoundTrips(t *testing.T) {
	t.Parallel()
	perNew, _, _ := roundTrips(t, phases.Config{}, 20)
	require.LessOrEqual(t, perNew, 3.0)
}

// A replay is the one read that finds the key done, in one exchange,
// whichever way it comes: first read by a process that has seen the key
// (a plain lookup), or by the claim's exchange in one that has not, whose
// claim reads the key and whose failed check costs no exchange of its own.
func TestReplayCostsOneRoundTrip(t *testing.T) {
	t.Parallel()
	_, perReplay, perColdReplay := roundTrips(t, phases.Config{}, 20)
	require.LessOrEqual(t, perReplay, 1.0)
	require.LessOrEqual(t, perColdReplay, 1.0)
	// Committing every phase on its own costs more exchanges for a new
	// charge, but a replay is the same one read.
	_, perReplay, perColdReplay = roundTrips(t, phases.Config{OneCommitPerPhase: true}, 10)
	require.LessOrEqual(t, perReplay, 1.0)
	require.LessOrEqual(t, perColdReplay, 1.0)
}
