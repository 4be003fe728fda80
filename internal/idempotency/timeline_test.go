package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// publicError is a cause with public words (idempotency.PublicError), as
// the PSP client's failures are.
type publicError struct {
	words string
	err   error
}

func (e publicError) Error() string        { return e.err.Error() }
func (e publicError) PublicReason() string { return e.words }
func (e publicError) Unwrap() error        { return e.err }

// kinds returns the kinds of a timeline, in order.
func kinds(es []idempotency.Entry) []idempotency.Kind {
	out := make([]idempotency.Kind, len(es))
	for i, e := range es {
		out[i] = e.Kind
	}
	return out
}

func history(t *testing.T, b *testBundle, q idempotency.DBTX, key string) idempotency.History {
	t.Helper()
	h, err := idempotency.ReadHistory(context.Background(), q, b.tenant, key)
	require.NoError(t, err)
	return h
}

// Every change of a key is in its timeline, in the statement that makes
// it: the claim, each recovery point, a noted PSP call with the next
// write, a release with its reason and next attempt, a takeover by
// another process, the finish. The database stamps each entry with its
// clock and the lock_version the change left; each names its holder.
func TestTimelineRecordsEveryChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	then := testdb.Pool(t, b.url, t0)
	later := testdb.Pool(t, b.url, t0.Add(time.Hour))
	reaper, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute, Role: idempotency.RoleReaper})
	require.NoError(t, err)
	require.NotEqual(t, b.store.Holder(), reaper.Holder())
	require.Equal(t, idempotency.RoleReaper, idempotency.RoleOf(reaper.Holder()))

	rec, created, err := claim(ctx, then, b.store, b.tenant, "life", b.req)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, b.store.Holder(), history(t, b, then, "life").Holder, "the claim's holder holds it")
	lease := b.store.LeaseOf(rec)
	require.NoError(t, pgx.BeginFunc(ctx, then, func(tx pgx.Tx) error { return lease.Advance(ctx, tx, "thing_created") }))
	status, ms, none := 503, int64(12), 0
	lease.Note(idempotency.Entry{Kind: idempotency.KindPSPCall, PSP: "default", Operation: "authorize",
		PSPKey: "th_1:authorize", Outcome: "unknown", Status: &status, DurationMS: &ms, Sends: &none, Lookups: &none})
	_, err = lease.Release(ctx, then, publicError{"PSP answered 503", errors.New(`Post "http://10.0.0.7/v1": 503 upstream`)}, 0)
	require.NoError(t, err)
	require.Empty(t, history(t, b, then, "life").Holder, "nobody holds a released key")

	seen, err := reaper.Lookup(ctx, later, b.tenant, "life")
	require.NoError(t, err)
	taken, err := reaper.TakeOverExpired(ctx, later, 10)
	require.NoError(t, err)
	require.Len(t, taken, 1)
	require.Equal(t, seen.LockVersion+1, taken[0].Record.LockVersion)
	require.Equal(t, reaper.Holder(), history(t, b, later, "life").Holder)
	require.NoError(t, pgx.BeginFunc(ctx, later, func(tx pgx.Tx) error {
		return taken[0].Finish(ctx, tx, idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte("{}")})
	}))

	h := history(t, b, later, "life")
	require.Empty(t, h.Holder)
	require.Equal(t, []idempotency.Kind{idempotency.KindClaimed, idempotency.KindReached, idempotency.KindPSPCall,
		idempotency.KindReleased, idempotency.KindTakenOver, idempotency.KindFinished}, kinds(h.Entries))
	e := h.Entries
	for i, holder := range []string{b.store.Holder(), b.store.Holder(), b.store.Holder(), b.store.Holder(), reaper.Holder(), reaper.Holder()} {
		require.Equal(t, holder, e[i].Holder, "entry %d", i)
	}
	for i, lv := range []int64{1, 1, 1, 1, 2, 2} {
		require.Equal(t, lv, e[i].LockVersion, "entry %d", i)
	}
	for i := range 4 {
		require.True(t, e[i].At.Equal(t0), "entry %d at %s: the database's clock", i, e[i].At)
	}
	require.True(t, e[4].At.Equal(t0.Add(time.Hour)))
	require.Equal(t, idempotency.RecoveryPoint("thing_created"), e[1].RecoveryPoint)
	require.Equal(t, "th_1:authorize", e[2].PSPKey)
	require.Equal(t, 503, *e[2].Status)
	require.Equal(t, int64(12), *e[2].DurationMS)
	require.Equal(t, "PSP answered 503", e[3].Reason)
	require.Contains(t, e[3].Detail, "10.0.0.7", "the raw cause is kept for operators")
	require.NotNil(t, e[3].NextAttemptAt)
	require.WithinRange(t, *e[3].NextAttemptAt, t0.Add(750*time.Millisecond), t0.Add(1250*time.Millisecond),
		"the next attempt the release set")
	require.Equal(t, idempotency.RoleReaper, e[4].By)
	require.Equal(t, 201, e[5].ResponseStatus)
	require.Equal(t, "life", h.ID.Key)
}

// A key given up (needs_attention) has no next attempt, and its released
// entry says so by having none; a cause without public words gets the
// generic reason, as last_error does, never the raw text.
func TestTimelineOfAGivenUpKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	store, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute, GiveUpAfter: time.Second})
	require.NoError(t, err)
	t0 := time.Now().UTC().Truncate(time.Second)
	rec, _, err := claim(ctx, testdb.Pool(t, b.url, t0), store, b.tenant, "given-up", b.req)
	require.NoError(t, err)
	rel, err := store.LeaseOf(rec).Release(ctx, testdb.Pool(t, b.url, t0.Add(time.Minute)), errors.New("dial tcp 10.0.0.7:443: refused"), 0)
	require.NoError(t, err)
	require.True(t, rel.NeedsAttention)
	e := history(t, b, b.pool, "given-up").Entries
	require.Equal(t, []idempotency.Kind{idempotency.KindClaimed, idempotency.KindReleased}, kinds(e))
	require.Nil(t, e[1].NextAttemptAt)
	require.Equal(t, idempotency.ReasonInternal, e[1].Reason)
}

// TIMELINE=off (make bench's comparison) records nothing: no entry, no
// holder.
func TestTimelineOffRecordsNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	off, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute, TimelineOff: true})
	require.NoError(t, err)
	rec, _, err := claim(ctx, b.pool, off, b.tenant, "quiet", b.req)
	require.NoError(t, err)
	lease := off.LeaseOf(rec)
	lease.Note(idempotency.Entry{Kind: idempotency.KindPSPCall})
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if err := lease.Advance(ctx, tx, "p"); err != nil {
			return err
		}
		return lease.Finish(ctx, tx, idempotency.Response{Status: 201, ContentType: "application/json", Body: []byte("{}")})
	}))
	var timeline, holder *string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT timeline::text, holder FROM idempotency_keys WHERE key = 'quiet'`).Scan(&timeline, &holder))
	require.Nil(t, timeline)
	require.Nil(t, holder)
	require.Empty(t, history(t, b, b.pool, "quiet").Entries)
}

// A timeline lives in its key's row: retention's drop of the day takes it
// with the key, and nothing of it is left to read.
func TestTimelineGoesWithItsPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	d := day(60)
	finishedKey(t, b, d.Add(time.Hour), "gone", true)
	require.Len(t, history(t, b, b.pool, "gone").Entries, 2)

	report, err := idempotency.DropExpiredPartitions(ctx, testdb.Pool(t, b.url, d.Add(72*time.Hour)), 24*time.Hour)
	require.NoError(t, err)
	require.Contains(t, report.Dropped, partitionName(d))
	_, err = idempotency.ReadHistory(ctx, b.pool, b.tenant, "gone")
	require.ErrorIs(t, err, idempotency.ErrNotFound)
	var left int
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE timeline IS NOT NULL`).Scan(&left))
	require.Zero(t, left)
}

// A run the database failed under gives its lease up without an attempt
// (Unlock): its timeline says released, for that reason, due at once, and
// keeps the PSP call the run had made.
func TestTimelineOfAnUnlockedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	rec, _, err := claim(ctx, b.pool, b.store, b.tenant, "blip", b.req)
	require.NoError(t, err)
	lease := b.store.LeaseOf(rec)
	lease.Note(idempotency.Entry{Kind: idempotency.KindPSPCall, Outcome: "success"})
	require.NoError(t, lease.Unlock(ctx, b.pool))
	h := history(t, b, b.pool, "blip")
	require.Equal(t, []idempotency.Kind{idempotency.KindClaimed, idempotency.KindPSPCall, idempotency.KindReleased}, kinds(h.Entries))
	released := h.Entries[2]
	require.Equal(t, idempotency.ReasonDatabaseUnavailable, released.Reason)
	require.NotNil(t, released.NextAttemptAt)
	require.True(t, released.NextAttemptAt.Equal(released.At), "due at once")
	require.Equal(t, b.store.Holder(), released.Holder)
	require.Empty(t, h.Holder)
}

// A heartbeat is where a holder was last heard of: a holder that dies in
// a slow call leaves its last renewal in the timeline (the console ends
// its hold there). A run of heartbeats is one entry whose time moves, so
// that a long call does not grow the row; a heartbeat after another entry
// starts a new one. With the timeline off, nothing is recorded.
func TestHeartbeatIsRecordedAsOneMovingEntry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	t0 := time.Now().UTC().Truncate(time.Second)
	at := func(d time.Duration) *pgxpool.Pool { return testdb.Pool(t, b.url, t0.Add(d)) }
	rec, _, err := claim(ctx, at(0), b.store, b.tenant, "slow", b.req)
	require.NoError(t, err)
	lease := b.store.LeaseOf(rec)
	require.NoError(t, lease.Extend(ctx, at(time.Second)))
	require.NoError(t, lease.Extend(ctx, at(2*time.Second)))
	h := history(t, b, at(2*time.Second), "slow")
	require.Equal(t, []idempotency.Kind{idempotency.KindClaimed, idempotency.KindHeartbeat}, kinds(h.Entries))
	hb := h.Entries[1]
	require.True(t, hb.At.Equal(t0.Add(2*time.Second)), "the last heartbeat's time: %s", hb.At)
	require.Equal(t, b.store.Holder(), hb.Holder)
	require.Equal(t, rec.LockVersion, hb.LockVersion)

	require.NoError(t, pgx.BeginFunc(ctx, at(3*time.Second), func(tx pgx.Tx) error { return lease.Advance(ctx, tx, "thing_created") }))
	require.NoError(t, lease.Extend(ctx, at(4*time.Second)))
	h = history(t, b, at(4*time.Second), "slow")
	require.Equal(t, []idempotency.Kind{idempotency.KindClaimed, idempotency.KindHeartbeat, idempotency.KindReached, idempotency.KindHeartbeat},
		kinds(h.Entries))
	require.True(t, h.Entries[1].At.Equal(t0.Add(2*time.Second)), "an earlier run of heartbeats keeps its time")
	require.True(t, h.Entries[3].At.Equal(t0.Add(4*time.Second)))

	off, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute, TimelineOff: true})
	require.NoError(t, err)
	rec, _, err = claim(ctx, at(0), off, b.tenant, "slow-off", b.req)
	require.NoError(t, err)
	require.NoError(t, off.LeaseOf(rec).Extend(ctx, at(time.Second)))
	require.Empty(t, history(t, b, at(time.Second), "slow-off").Entries)
}
