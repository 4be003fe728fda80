package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Every pool, server and client a test starts is stopped by its
// cleanups, so nothing needs ignoring here.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newTenant(t *testing.T, pool *pgxpool.Pool, name string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pool.QueryRow(context.Background(), `INSERT INTO tenants (name) VALUES ($1) RETURNING id`, name).Scan(&id))
	return id
}

// An event exists exactly when the transaction that wrote it commits, and
// its body is stored once: what Get and List return is the same bytes,
// with the object's JSON as given.
func TestEventExistsOnlyIfItsTransactionCommits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	tenant := newTenant(t, pool, "t")
	obj := []byte(`{"id":"ch_1","object":"charge","status":"authorized"}`)

	var rolledBack events.Event
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		rolledBack, err = events.Write(ctx, tx, tenant, events.ChargeAuthorized, obj)
		require.NoError(t, err)
		return errors.New("the change fails")
	})
	require.Error(t, err)
	_, err = events.Get(ctx, pool, tenant, rolledBack.ID)
	require.ErrorIs(t, err, events.ErrNotFound)

	var ev events.Event
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ev, err = events.Write(ctx, tx, tenant, events.ChargeAuthorized, obj)
		return err
	}))
	got, err := events.Get(ctx, pool, tenant, ev.ID)
	require.NoError(t, err)
	require.Equal(t, ev.Body, got.Body)
	var body struct {
		ID, Object, Type, CreatedAt string `json:"-"`
		Data                        struct {
			Object json.RawMessage `json:"object"`
		} `json:"data"`
	}
	require.NoError(t, json.Unmarshal(got.Body, &body))
	require.JSONEq(t, string(obj), string(body.Data.Object))
	require.Contains(t, string(got.Body), `{"id":"`+ev.ID+`","object":"event","type":"charge.authorized","created_at":"`)
	at, ok := events.CreatedAtOfID(ev.ID)
	require.True(t, ok)
	require.True(t, at.Equal(got.CreatedAt), "the id carries created_at: %s vs %s", at, got.CreatedAt)

	list, err := events.List(ctx, pool, tenant, "", "", 10)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, ev.Body, list[0].Body)

	// Another tenant's id is unknown.
	other := newTenant(t, pool, "other")
	_, err = events.Get(ctx, pool, other, ev.ID)
	require.ErrorIs(t, err, events.ErrNotFound)
	_, err = events.Get(ctx, pool, tenant, "evt_nothex")
	require.ErrorIs(t, err, events.ErrNotFound)
}

// The list pages newest first by keyset and filters on type.
func TestListPagesByTypeNewestFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	tenant := newTenant(t, pool, "t")
	var ids []string
	for i := range 5 {
		typ := events.ChargeAuthorized
		if i%2 == 1 {
			typ = events.ChargeDeclined
		}
		ev, err := events.Write(ctx, pool, tenant, typ, fmt.Appendf(nil, `{"n":%d}`, i))
		require.NoError(t, err)
		ids = append(ids, ev.ID)
	}
	page, err := events.List(ctx, pool, tenant, "", "", 2)
	require.NoError(t, err)
	require.Equal(t, []string{ids[4], ids[3]}, []string{page[0].ID, page[1].ID})
	page, err = events.List(ctx, pool, tenant, "", ids[3], 10)
	require.NoError(t, err)
	require.Len(t, page, 3)
	require.Equal(t, ids[2], page[0].ID)
	page, err = events.List(ctx, pool, tenant, events.ChargeDeclined, "", 10)
	require.NoError(t, err)
	require.Len(t, page, 2)
	for _, ev := range page {
		require.Equal(t, events.ChargeDeclined, ev.Type)
	}
	_, err = events.List(ctx, pool, tenant, "", "evt_00000000000000aaaaaaaaaaaaaaaa", 10)
	require.ErrorIs(t, err, events.ErrNotFound)
}

// Retention drops a day's events, deliveries and attempts whole; a day with
// a delivery still being retried stays, whatever its age.
func TestRetentionNeverDropsAnEventStillBeingRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.NewURL(t)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	yesterday := testdb.Pool(t, url, today.Add(-12*time.Hour))
	now := testdb.Pool(t, url, today.Add(time.Hour))
	tenant := newTenant(t, now, "t")
	_, err := now.Exec(ctx, `INSERT INTO webhook_endpoints (tenant_id, id, url, events, secret, slot) VALUES ($1, 'we_1', 'http://x', '{*}', 'whsec_x', 1)`, tenant)
	require.NoError(t, err)
	old, err := events.Write(ctx, yesterday, tenant, events.ChargeAuthorized, []byte(`{}`))
	require.NoError(t, err)
	recent, err := events.Write(ctx, now, tenant, events.ChargeAuthorized, []byte(`{}`))
	require.NoError(t, err)

	_, err = now.Exec(ctx, `UPDATE webhook_deliveries SET state = 'succeeded' WHERE event_id = $1`, recent.ID)
	require.NoError(t, err)

	// Ten days on, with a retention of a day: yesterday's delivery still
	// pending keeps yesterday; every other expired day goes.
	later := testdb.Pool(t, url, today.Add(10*24*time.Hour))
	_, err = events.EnsurePartitions(ctx, later)
	require.NoError(t, err)
	report, err := events.DropExpiredPartitions(ctx, later, 24*time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{today.Add(-24 * time.Hour).Format("20060102")}, report.Kept)
	require.Contains(t, report.Dropped, today.Format("20060102"))
	_, err = events.Get(ctx, later, tenant, old.ID)
	require.NoError(t, err)
	_, err = events.Get(ctx, later, tenant, recent.ID)
	require.ErrorIs(t, err, events.ErrNotFound)

	// Delivered at last: the day goes on the next pass.
	_, err = later.Exec(ctx, `UPDATE webhook_deliveries SET state = 'succeeded'`)
	require.NoError(t, err)
	report, err = events.DropExpiredPartitions(ctx, later, 24*time.Hour)
	require.NoError(t, err)
	require.Empty(t, report.Kept)
	require.Contains(t, report.Dropped, today.Add(-24*time.Hour).Format("20060102"))
	_, err = events.Get(ctx, later, tenant, old.ID)
	require.ErrorIs(t, err, events.ErrNotFound)
	var left int
	require.NoError(t, later.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname ~ '^(events|webhook_deliveries|webhook_attempts)_p'
		AND to_date(substring(relname from '[0-9]{8}$'), 'YYYYMMDD') < $1::date`, today.Add(9*24*time.Hour)).Scan(&left))
	require.Zero(t, left, "every expired day dropped from all three tables")
}
