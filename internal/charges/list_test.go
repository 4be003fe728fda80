package charges_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// Pages of a list, with every charge sharing one created_at (the test
// clock stands still): id alone orders them, and the pages together hold
// every charge once, in order.
func TestListPagesThroughTiesInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	svc := b.Service(t, 0, phases.Config{})
	var want []string
	for i := range 7 {
		req, _ := chargestest.Request(t, visa)
		res, err := svc.Create(ctx, b.Tenant, fmt.Sprintf("k%d", i), phases.Parsed(req))
		require.NoError(t, err)
		want = append(want, chargeID(t, res.Response))
	}
	slices.Sort(want)
	slices.Reverse(want) // newest first: one created_at, so id descending

	var got []string
	after := ""
	for range 10 {
		page, err := svc.List(ctx, b.Tenant, after, 3)
		require.NoError(t, err)
		for _, c := range page {
			require.Equal(t, b.T0, c.CreatedAt.UTC(), "the test clock stands still")
			got = append(got, c.ID)
		}
		if len(page) < 3 {
			break
		}
		after = page[len(page)-1].ID
	}
	require.Equal(t, want, got)

	_, err := svc.List(ctx, b.Tenant, "ch_unknown", 3)
	require.ErrorIs(t, err, charges.ErrNotFound)
	_, err = svc.List(ctx, b.Tenant+1000, want[0], 3)
	require.ErrorIs(t, err, charges.ErrNotFound, "another tenant's cursor is not found")
	page, err := svc.List(ctx, b.Tenant+1000, "", 3)
	require.NoError(t, err)
	require.Empty(t, page, "another tenant sees none")
}

// The refunds of one charge, newest first; another tenant's charge is not
// found rather than an empty list.
func TestListRefundsOfACharge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	svc := b.Service(t, 0, phases.Config{})
	id := authorized(t, b, svc)
	capReq, err := charges.ParseCaptureRequest(id, []byte(`{}`))
	require.NoError(t, err)
	_, err = svc.Capture(ctx, b.Tenant, "cap", id, phases.Parsed(capReq))
	require.NoError(t, err)
	req, _ := chargestest.Request(t, visa)
	res, err := svc.Create(ctx, b.Tenant, "other", phases.Parsed(req))
	require.NoError(t, err)
	other := chargeID(t, res.Response) // a charge with no refunds
	var want []string
	for i := range 4 {
		req, _, err := charges.ParseRefundRequest([]byte(`{"charge":"` + id + `","amount":100}`))
		require.NoError(t, err)
		res, err := svc.Refund(ctx, b.Tenant, fmt.Sprintf("r%d", i), phases.Parsed(req))
		require.NoError(t, err)
		require.Equal(t, 201, res.Response.Status)
		var r struct{ ID string }
		require.NoError(t, json.Unmarshal(res.Response.Body, &r))
		want = append(want, r.ID)
	}
	slices.Sort(want)
	slices.Reverse(want)

	first, err := svc.ListRefunds(ctx, b.Tenant, id, "", 3)
	require.NoError(t, err)
	rest, err := svc.ListRefunds(ctx, b.Tenant, id, first[2].ID, 3)
	require.NoError(t, err)
	var got []string
	for _, r := range append(first, rest...) {
		require.Equal(t, id, r.Charge)
		got = append(got, r.ID)
	}
	require.Equal(t, want, got)

	all, err := svc.ListRefunds(ctx, b.Tenant, "", "", 10)
	require.NoError(t, err)
	require.Len(t, all, 4)
	none, err := svc.ListRefunds(ctx, b.Tenant, other, "", 10)
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = svc.ListRefunds(ctx, b.Tenant+1000, id, "", 10)
	require.ErrorIs(t, err, charges.ErrNotFound)
	_, err = svc.ListRefunds(ctx, b.Tenant, id, "re_unknown", 10)
	require.ErrorIs(t, err, charges.ErrRefundNotFound)
}

// Each list statement reads its index as a range from the cursor on (an
// Index Cond on created_at), not by reading and discarding the rows above
// it: a deep page costs what the first one does.
func TestListQueriesUseTheirIndexFromTheCursor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, tc := range []struct {
		name, sql, index string
		args             []any
	}{
		{"charges", charges.ListChargesSQL, "charges_tenant_created", []any{b.Tenant, b.T0, "ch_x", 10}},
		// On an empty table the planner may as well take
		// refunds_tenant_created and filter on the charge: either is a
		// range from the cursor on.
		{"refunds of a charge", charges.ListRefundsSQL, "refunds_", []any{b.Tenant, "ch_x", b.T0, "re_x", 10}},
		{"all refunds", charges.ListAllRefundsSQL, "refunds_tenant_created", []any{b.Tenant, b.T0, "re_x", 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plan := explain(ctx, t, b.Pool, tc.sql, tc.args)
			require.Contains(t, plan, "Index Scan using "+tc.index, plan)
			require.Regexp(t, `Index Cond: .*ROW\(created_at, id\) <`, plan, "the cursor bounds the scan")
			require.NotContains(t, plan, "Sort", "the index gives the order")
		})
	}
}

// explain returns the generic plan of sql (the one a prepared statement
// ends up with), with sequential scans off so that an empty test table
// still shows which index the statement can use and how.
func explain(ctx context.Context, t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, sql string, args []any) string {
	t.Helper()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	rows, err := tx.Query(ctx, "EXPLAIN "+sql, args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}
