package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// rangeChecksSQL lists the CHECK constraints of attached partitions that
// are their own (the parent has no such CHECK) and read only the partition
// key's columns: a CHECK that restates the partition's bound. The ensure
// functions add one to let ATTACH skip its scan (migrations/00006);
// attached, it only costs every INSERT and UPDATE of the partition its
// compilation (migrations/00016).
const rangeChecksSQL = `
SELECT c.relname, k.conname
  FROM pg_inherits i
  JOIN pg_partitioned_table p ON p.partrelid = i.inhparent
  JOIN pg_class c ON c.oid = i.inhrelid
  JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'c'
 WHERE NOT i.inhdetachpending
   AND k.coninhcount = 0
   AND k.conkey <@ p.partattrs::int2[]
 ORDER BY 1, 2`

// partitionsSQL counts the attached partitions of each partitioned table.
const partitionsSQL = `
SELECT p.partrelid::regclass::text, count(i.inhrelid)
  FROM pg_partitioned_table p LEFT JOIN pg_inherits i ON i.inhparent = p.partrelid
 GROUP BY 1`

// Every partition, those the migrations attached and those attached later
// by the ensure functions (days of keys and events, months of heads), has
// no CHECK that restates its bound; a row out of its range is still
// refused, by the bound.
func TestAttachedPartitionsCarryNoRangeCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)

	// Partitions attached after the migrations: 40 days on, in a month of
	// heads of its own.
	_, err := pool.Exec(ctx, `
		SELECT idempotency_keys_ensure_partitions(current_date + 40, 2),
		       (SELECT sum(phasepay_ensure_day_partitions(t, c, current_date + 40, 2))
		          FROM (VALUES ('events', 'created_at'), ('webhook_deliveries', 'event_created_at'),
		                       ('webhook_attempts', 'event_created_at')) AS p (t, c))`)
	require.NoError(t, err)

	rows, err := pool.Query(ctx, partitionsSQL)
	require.NoError(t, err)
	counts := map[string]int{}
	var (
		parent string
		n      int
	)
	_, err = pgx.ForEachRow(rows, []any{&parent, &n}, func() error { counts[parent] = n; return nil })
	require.NoError(t, err)
	for _, table := range []string{"idempotency_keys", "events", "webhook_deliveries", "webhook_attempts"} {
		require.GreaterOrEqual(t, counts[table], 7, "%s: the days of the migrations and the two added", table)
	}
	require.GreaterOrEqual(t, counts["idempotency_key_heads"], 2, "this month's heads and those 40 days on")

	rows, err = pool.Query(ctx, rangeChecksSQL)
	require.NoError(t, err)
	checks, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (string, error) {
		var table, name string
		err := row.Scan(&table, &name)
		return table + "." + name, err
	})
	require.NoError(t, err)
	require.Empty(t, checks, "CHECKs that restate a partition's bound")

	// The bound alone keeps a partition's rows in its range.
	var day string
	require.NoError(t, pool.QueryRow(ctx, `SELECT to_char(current_date + 40, 'YYYYMMDD')`).Scan(&day))
	_, err = pool.Exec(ctx, `INSERT INTO events_p`+day+` (tenant_id, id, type, created_at, body) VALUES (1, 'evt_x', 'x', now(), '{}')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code, "check_violation: %v", err)
	require.Contains(t, pgErr.Message, "partition constraint")
}
