package charges_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// statementCounter counts the statements a pool's connections send (each
// query of a pipelined batch, and each query on its own), through pgx's
// tracer interfaces; prepares are not statements of a request.
type statementCounter struct{ n atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}
func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Pitfall: a request log that costs a statement of its own. A timeline
// written as rows of an events table of its own, or by an UPDATE after
// each change, would add a statement (and, outside the change's
// transaction, a commit) to every claim, phase and finish. The timeline is
// appended by the statements that make each change, and a PSP call's
// entry rides in the next one: a new charge sends the same statements in
// the same round trips with the timeline on as with it off, and its
// timeline holds every change.
func TestTimelineCostsNoStatementOfItsOwn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	req, _ := chargestest.Request(t, visa)
	measure := func(off bool) (statements, trips float64, keys *idempotency.Store) {
		keys, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute, TimelineOff: off})
		require.NoError(t, err)
		stmts, rt := &statementCounter{}, &tripCounter{}
		pool := testdb.Pool(t, b.URL, b.T0, func(cfg *pgxpool.Config) { cfg.ConnConfig.Tracer = stmts }, rt.configure)
		svc := chargestest.NewService(t, pool, keys, b.PSP, phases.Config{})
		create := func(key string) {
			res, err := svc.Create(ctx, b.Tenant, key, phases.Parsed(req))
			require.NoError(t, err)
			require.Equal(t, phases.OutcomeNew, res.Outcome)
		}
		for i := range 3 { // connections and their prepared statements
			create(fmt.Sprintf("warm-%v-%d", off, i))
		}
		const n = 10
		s0, t0 := stmts.n.Load(), rt.n.Load()
		for i := range n {
			create(fmt.Sprintf("tl-%v-%d", off, i))
		}
		return float64(stmts.n.Load()-s0) / n, float64(rt.n.Load()-t0) / n, keys
	}
	onStatements, onTrips, _ := measure(false)
	offStatements, offTrips, _ := measure(true)
	t.Logf("per new charge: %.1f statements, %.1f round trips with the timeline; %.1f and %.1f without",
		onStatements, onTrips, offStatements, offTrips)
	require.InDelta(t, offStatements, onStatements, 0.001)
	require.InDelta(t, offTrips, onTrips, 0.001)

	h, err := idempotency.ReadHistory(ctx, b.Pool, b.Tenant, "tl-false-0")
	require.NoError(t, err)
	require.Equal(t, []idempotency.Kind{idempotency.KindClaimed, idempotency.KindReached, idempotency.KindPSPCall, idempotency.KindFinished},
		kindsOf(h.Entries))
	off, err := idempotency.ReadHistory(ctx, b.Pool, b.Tenant, "tl-true-0")
	require.NoError(t, err)
	require.Empty(t, off.Entries)
}

func kindsOf(es []idempotency.Entry) []idempotency.Kind {
	out := make([]idempotency.Kind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

// One commit per phase records the same life, with a reached entry for
// every recovery point committed on its own.
func TestTimelineOfOneCommitPerPhase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	req, _ := chargestest.Request(t, visa)
	_, err := b.Service(t, 0, phases.Config{OneCommitPerPhase: true}).Create(ctx, b.Tenant, "slow", phases.Parsed(req))
	require.NoError(t, err)
	h, err := idempotency.ReadHistory(ctx, b.Pool, b.Tenant, "slow")
	require.NoError(t, err)
	require.Equal(t, []idempotency.Kind{idempotency.KindClaimed, idempotency.KindReached, idempotency.KindPSPCall,
		idempotency.KindReached, idempotency.KindFinished}, kindsOf(h.Entries))
	require.Equal(t, charges.PointChargeCreated, h.Entries[1].RecoveryPoint)
	require.Equal(t, charges.PointPSPAuthorized, h.Entries[3].RecoveryPoint)
}
