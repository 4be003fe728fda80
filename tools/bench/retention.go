package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retention compares dropping a day partition with deleting its rows.
type Retention struct {
	Rows             int     `json:"rows"`
	DetachMs         float64 `json:"detach_ms"`
	DropMs           float64 `json:"drop_ms"`
	DropWALBytes     int64   `json:"drop_wal_bytes"`
	DropDeadTuples   int64   `json:"drop_dead_tuples"`
	DeleteMs         float64 `json:"delete_ms"`
	DeleteWALBytes   int64   `json:"delete_wal_bytes"`
	DeleteDeadTuples int64   `json:"delete_dead_tuples"`
}

// retention compares the two ways to forget a day of keys: dropping its
// partition (what the reaper does) and deleting its rows in batches of
// 10,000 (what a table without partitions would need). Two identical old
// days are filled; one is deleted, the other dropped.
func (e *env) retention(ctx context.Context, res *Results) error {
	n := e.cfg.RetentionRows
	r := Retention{Rows: n}
	// A connection of its own, closed before the dead tuples are counted: a
	// backend that exits flushes its statistics.
	conn, err := pgx.Connect(ctx, e.dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var tenantID int64
	if err := conn.QueryRow(ctx, `SELECT id FROM tenants WHERE name = 'bench'`).Scan(&tenantID); err != nil {
		return err
	}
	for _, stmt := range []string{
		`SELECT idempotency_keys_ensure_partitions('2020-01-01', 2)`,
		`SET session_replication_role = replica`,
		fmt.Sprintf(`INSERT INTO idempotency_keys (tenant_id, key, created_at, fingerprint, request_method, request_path,
		     request_body, state, recovery_point, response_status, response_content_type, response_body)
		 SELECT %d, 'old-' || d || '-' || g, d::timestamptz + (g %% 86000) * interval '1 second', sha256(int8send(g)),
		        'POST', '/v1/charges', convert_to('%s', 'UTF8'), 'done', 'done', 201, 'application/json',
		        convert_to(repeat('x', 260), 'UTF8')
		   FROM generate_series(1, %d) g, (VALUES (date '2020-01-01'), (date '2020-01-02')) AS days(d)`, tenantID, visa, n),
		`RESET session_replication_role`,
		`VACUUM ANALYZE idempotency_keys_p20200101, idempotency_keys_p20200102`,
		`CHECKPOINT`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%.60s…: %w", stmt, err)
		}
	}

	// Delete day 2 in batches of 10,000, each its own transaction.
	lsn0, err := lsn(ctx, conn)
	if err != nil {
		return err
	}
	t0 := time.Now()
	for {
		tag, err := conn.Exec(ctx, `DELETE FROM idempotency_keys_p20200102 WHERE ctid = ANY (ARRAY(
			SELECT ctid FROM idempotency_keys_p20200102 LIMIT 10000))`)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			break
		}
	}
	r.DeleteMs = ms(time.Since(t0))
	if r.DeleteWALBytes, err = walSince(ctx, conn, lsn0); err != nil {
		return err
	}

	// Claims of new keys, one after the other, for as long as the drop
	// below will take (at least 3 s), without it: the reference.
	quiet, err := measureClaimsWhile(ctx, e.claims, tenantID, "quiet", 3*time.Second, func() error { return nil })
	if err != nil {
		return fmt.Errorf("claims without the drop: %w", err)
	}

	// Drop day 1 as the reaper does: DETACH … CONCURRENTLY, then DROP,
	// while the same claims run.
	lsn1, err := lsn(ctx, conn)
	if err != nil {
		return err
	}
	during, err := measureClaimsWhile(ctx, e.claims, tenantID, "during-drop", 0, func() error {
		t1 := time.Now()
		if _, err := conn.Exec(ctx, `ALTER TABLE idempotency_keys DETACH PARTITION idempotency_keys_p20200101 CONCURRENTLY`); err != nil {
			return err
		}
		r.DetachMs = ms(time.Since(t1))
		t2 := time.Now()
		if _, err := conn.Exec(ctx, `DROP TABLE idempotency_keys_p20200101`); err != nil {
			return err
		}
		r.DropMs = ms(time.Since(t2))
		return nil
	})
	if err != nil {
		return fmt.Errorf("drop while claiming: %w", err)
	}
	if r.DropWALBytes, err = walSince(ctx, conn, lsn1); err != nil {
		return err
	}
	q, d := summarize(quiet), summarize(during)
	res.DropImpact = DropImpact{Rows: n, QuietP50: q.P50, QuietP99: q.P99, DuringP50: d.P50, DuringP99: d.P99,
		DuringClaims: len(during), Ratio: ratio(d.P99, q.P99)}
	e.log("  claims during the drop: p99 %.3f ms over %d claims, without: %.3f ms (%.2f×)", d.P99, len(during), q.P99, res.DropImpact.Ratio)

	// Dead tuples: what VACUUM must now clean up.
	if err := conn.Close(ctx); err != nil {
		return err
	}
	time.Sleep(time.Second)
	err = e.pool.QueryRow(ctx, `SELECT coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'idempotency_keys_p20200102'), 0)`).
		Scan(&r.DeleteDeadTuples)
	if err != nil {
		return err
	}
	// A dropped partition leaves no table, hence no dead tuple.
	err = e.pool.QueryRow(ctx, `SELECT coalesce((SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'idempotency_keys_p20200101'), 0)`).
		Scan(&r.DropDeadTuples)
	if err != nil {
		return err
	}
	res.Retention = r
	e.log("  %d rows: drop %.1f ms (+ detach %.1f ms), %d WAL bytes, %d dead tuples; delete %.0f ms, %d WAL bytes, %d dead tuples",
		n, r.DropMs, r.DetachMs, r.DropWALBytes, r.DropDeadTuples, r.DeleteMs, r.DeleteWALBytes, r.DeleteDeadTuples)
	_, err = e.pool.Exec(ctx, `DROP TABLE idempotency_keys_p20200102`)
	return err
}

func lsn(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (string, error) {
	var l string
	err := q.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&l)
	return l, err
}

func walSince(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, from string) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, from).Scan(&n)
	return n, err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
