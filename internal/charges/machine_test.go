package charges_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Every pool, server and client a test starts is stopped by its
// cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func setup(t *testing.T) *chargestest.Bundle {
	t.Helper()
	return chargestest.Setup(t, idempotency.Config{})
}

const visa = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`

// commitCounter counts the transactions a pool commits: a COMMIT sent on
// its own or in a batch, and a batch sent outside any transaction and
// without a BEGIN, which PostgreSQL runs as one implicit transaction,
// committed at its Sync if no statement in it failed (the phase engine's
// pipelined transactions send a claim so).
type commitCounter struct {
	mu sync.Mutex
	n  int
}

type implicitBatch struct{}

func isCommit(sql string) bool { return strings.EqualFold(strings.TrimSpace(sql), "commit") }

func (c *commitCounter) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}

func (c *commitCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if isCommit(data.SQL) {
		c.add()
	}
	return ctx
}

func (c *commitCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *commitCounter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	qs := data.Batch.QueuedQueries
	if conn.PgConn().TxStatus() == 'I' && len(qs) > 0 && !strings.EqualFold(strings.TrimSpace(qs[0].SQL), "begin") {
		return context.WithValue(ctx, implicitBatch{}, true)
	}
	return ctx
}

func (c *commitCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if isCommit(data.SQL) && data.Err == nil {
		c.add()
	}
}

func (c *commitCounter) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	if ctx.Value(implicitBatch{}) != nil && data.Err == nil {
		c.add()
	}
}

func (c *commitCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// The claim must commit before the PSP call, and the local phases around it
// fold into the two transactions; with OneCommitPerPhase every phase commits.
func TestCommitsPerNewCharge(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cfg  phases.Config
		want int
	}{
		{phases.Config{}, 2},
		{phases.Config{OneCommitPerPhase: true}, 4},
	} {
		t.Run(fmt.Sprint(tt.want), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := setup(t)
			counter := &commitCounter{}
			pool := testdb.Pool(t, b.URL, b.T0, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter })
			svc := chargestest.NewService(t, pool, b.Keys, b.PSP, tt.cfg)

			req, _ := chargestest.Request(t, visa)
			res, err := svc.Create(ctx, b.Tenant, "commits", phases.Parsed(req))
			require.NoError(t, err)
			require.Equal(t, 201, res.Response.Status)
			require.Equal(t, tt.want, counter.count())

			state, point, lv := b.KeyState(t, "commits")
			require.Equal(t, "done", state)
			require.Equal(t, "done", point)
			require.EqualValues(t, 1, lv)

			// A replay is a plain read: nothing commits.
			res, err = svc.Create(ctx, b.Tenant, "commits", phases.Parsed(req))
			require.NoError(t, err)
			require.Equal(t, phases.OutcomeReplay, res.Outcome)
			require.Equal(t, tt.want, counter.count())
		})
	}
}
