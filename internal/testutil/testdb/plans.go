package testdb

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/dbpool"
)

// Plans records the plan of every statement run on a pool opened by
// PlansPool, with what each read: auto_explain's EXPLAIN (ANALYZE,
// BUFFERS), sent to the client as a notice. A test reads them to check
// that a statement costs what it picks, whatever sits beside it.
type Plans struct {
	mu    sync.Mutex
	plans []string
}

// PlansPool opens a pool on url configured as phasepay's processes
// configure theirs (dbpool.ConfigurePool: timeouts, one generic plan per
// statement), then by opts, whose every statement's plan p records from
// now on.
func (p *Plans) PlansPool(t testing.TB, url string, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return Pool(t, url, time.Time{}, func(cfg *pgxpool.Config) {
		dbpool.ConfigurePool(cfg, url)
		for _, o := range opts {
			o(cfg)
		}
		cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
			if strings.Contains(n.Message, "Query Text:") {
				p.mu.Lock()
				defer p.mu.Unlock()
				p.plans = append(p.plans, n.Message)
			}
		}
		next := cfg.AfterConnect
		cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
			if _, err := conn.Exec(ctx, `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;
SET auto_explain.log_analyze = on; SET auto_explain.log_timing = off; SET auto_explain.log_buffers = on;
SET auto_explain.log_level = notice`); err != nil {
				return err
			}
			if next != nil {
				return next(ctx, conn)
			}
			return nil
		}
	})
}

// Of returns the recorded plans that scan one of tables' partitions
// (<table>_pYYYYMMDD): the statements that read what grows.
func (p *Plans) Of(tables ...string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, plan := range p.plans {
		for _, t := range tables {
			if regexp.MustCompile(` on ` + regexp.QuoteMeta(t) + `_p\d{8}\b`).MatchString(plan) {
				out = append(out, plan)
				break
			}
		}
	}
	return out
}

var (
	partitionScan   = regexp.MustCompile(`Scan .*on \w+_p\d{8} .*actual rows=(\d+) loops=(\d+)`)
	removedByFilter = regexp.MustCompile(`Rows Removed by (?:Join )?Filter: (\d+)`)
)

// Reads returns, for a recorded plan, the most rows any one scan of a day
// partition returned over all its loops, and the most any one threw away
// (Rows Removed by Filter): what the statement read of the tables that
// grow.
func Reads(plan string) (scanned, removed int) {
	// A node's lines run from its "->" to the next node's.
	for _, node := range strings.Split(plan, "->") {
		m := partitionScan.FindStringSubmatch(node)
		if m == nil {
			continue
		}
		rows, _ := strconv.Atoi(m[1])
		loops, _ := strconv.Atoi(m[2])
		scanned = max(scanned, rows*loops)
		if r := removedByFilter.FindStringSubmatch(node); r != nil {
			n, _ := strconv.Atoi(r[1])
			removed = max(removed, n*loops)
		}
	}
	return scanned, removed
}
