package idempotency_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Browse pages through every tenant's requests newest first, by keyset:
// pages neither repeat nor skip a request, and each filter keeps what it
// names.
func TestBrowsePagesNewestFirstAcrossTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	var other int64
	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('other') RETURNING id`).Scan(&other))
	refund, err := idempotency.Canonicalize("POST", "/v1/refunds", []byte(`{"n":1}`))
	require.NoError(t, err)

	// Seven requests a minute apart, alternating tenants; every third a
	// refund; the fifth finished, the others unfinished (their leases ran
	// out long ago).
	t0 := time.Now().UTC().Add(-time.Hour)
	var want []string // newest first
	for i := range 7 {
		at := testdb.Pool(t, b.url, t0.Add(time.Duration(i)*time.Minute))
		tenant, req, op := b.tenant, b.req, "charges.create"
		if i%2 == 1 {
			tenant = other
		}
		if i%3 == 0 {
			req, op = refund, "refunds.create"
		}
		key := string(rune('a' + i))
		var rec idempotency.Record
		require.NoError(t, pgx.BeginFunc(ctx, at, func(tx pgx.Tx) error {
			rec, _, err = b.store.Claim(ctx, tx, idempotency.ClaimParams{TenantID: tenant, Key: key, Request: req, Operation: op})
			return err
		}))
		if i == 4 {
			resp := idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte(`{}`)}
			require.NoError(t, pgx.BeginFunc(ctx, at, func(tx pgx.Tx) error { return b.store.LeaseOf(rec).Finish(ctx, tx, resp) }))
		}
		want = append([]string{key}, want...)
	}

	keys := func(vs []idempotency.View) []string {
		out := []string{}
		for _, v := range vs {
			out = append(out, v.Key)
		}
		return out
	}
	var (
		got   []string
		after *idempotency.Cursor
	)
	for range 4 {
		page, err := idempotency.Browse(ctx, b.pool, idempotency.BrowseFilter{Limit: 2, After: after})
		require.NoError(t, err)
		got = append(got, keys(page)...)
		if len(page) < 2 {
			break
		}
		c := idempotency.CursorOf(page[len(page)-1])
		after = &c
	}
	require.Equal(t, want, got)

	for name, tc := range map[string]struct {
		f    idempotency.BrowseFilter
		want []string
	}{
		"tenant":     {idempotency.BrowseFilter{TenantID: other}, []string{"f", "d", "b"}},
		"completed":  {idempotency.BrowseFilter{State: idempotency.RequestCompleted}, []string{"e"}},
		"unfinished": {idempotency.BrowseFilter{State: idempotency.RequestUnfinished}, []string{"g", "f", "d", "c", "b", "a"}},
		"operation":  {idempotency.BrowseFilter{Operation: "refunds.create"}, []string{"g", "d", "a"}},
		"older than": {idempotency.BrowseFilter{OlderThan: time.Hour - 210*time.Second}, []string{"d", "c", "b", "a"}},
		"all of it":  {idempotency.BrowseFilter{TenantID: b.tenant, State: idempotency.RequestUnfinished, Operation: "refunds.create", OlderThan: time.Minute}, []string{"g", "a"}},
	} {
		t.Run(name, func(t *testing.T) {
			page, err := idempotency.Browse(ctx, b.pool, tc.f)
			require.NoError(t, err)
			require.Equal(t, tc.want, keys(page))
		})
	}
}
