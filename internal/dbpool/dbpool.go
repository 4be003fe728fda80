// Package dbpool is how every phasepay process connects to PostgreSQL:
// one traced pool, with the server-side limits and the plan cache mode
// every connection runs under. cmd/api and cmd/reaper wire the rest.
package dbpool

import (
	"context"
	"fmt"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/telemetry"
)

// DatabaseURLDefault is the contract's default DATABASE_URL.
const DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/phasepay?sslmode=disable"

// PoolMaxConnsDefault is the pool size when DATABASE_URL sets none.
const PoolMaxConnsDefault = 32

// The server-side limits every connection of every phasepay process runs
// under, unless DATABASE_URL sets its own (pgx passes an unknown URL
// parameter such as statement_timeout=30s to the server as a setting).
// docs/operations.md explains how they were chosen.
const (
	// StatementTimeoutDefault: every statement of a request or a reaper
	// pass is an index probe or a small write; one that runs for seconds
	// is stuck, and holding its locks and its client longer only spreads
	// the stall. The partition maintenance session raises it for its own
	// reads of whole partitions (see idempotency.MaintenanceSettings).
	StatementTimeoutDefault = 5 * time.Second
	// LockTimeoutDefault: no statement waits longer than this for a lock.
	// Claims of one key serialise on an advisory lock held for a claim's
	// few milliseconds, so a wait this long means a lock is held by
	// something that is not a claim (DDL, an operator's session); failing
	// with a retryable error beats queueing every request behind it.
	LockTimeoutDefault = 2 * time.Second
	// IdleInTransactionTimeoutDefault ends a session that sits in an open
	// transaction: phasepay never holds one across a foreign call, so such
	// a session is a bug or a stalled process, and its row locks would
	// otherwise block its keys until someone kills it.
	IdleInTransactionTimeoutDefault = 30 * time.Second
	// ConnectTimeoutDefault bounds opening a connection (connect_timeout):
	// a request facing an unreachable database answers 503 in well under
	// the contract's 5 s instead of waiting on the kernel's TCP timeouts.
	ConnectTimeoutDefault = 2 * time.Second
	// PlanCacheModeDefault (plan_cache_mode): every statement phasepay
	// prepares is planned once per connection and the plan reused.
	// idempotency_keys is partitioned by day, and PostgreSQL's default
	// (auto) keeps choosing a custom plan for a prepared statement on a
	// partitioned table, because the generic plan's estimated cost counts
	// every partition: the fenced writes of a new charge (the finish and
	// fence UPDATEs, all by full primary key) were planned again at every
	// execution, 0.23 ms of planning for 0.18 ms of execution. A generic
	// plan prunes the partitions at executor start instead.
	// docs/operations.md has the measurements.
	PlanCacheModeDefault = "force_generic_plan"
)

// ConfigurePool applies phasepay's connection limits and plan cache mode
// to cfg, for a connection string without a pooler (Configure), keeping
// whatever connString set explicitly. Tests and benchmarks that build
// their own pools call it.
func ConfigurePool(cfg *pgxpool.Config, connString string) {
	Configure(cfg.ConnConfig, connString, PoolerNone)
	cfg.AfterConnect = registerExecTypes
}

// readOnlySQLTransaction is SQLSTATE 25006: a write in a read-only
// transaction.
const readOnlySQLTransaction = "25006"

// leaveReadOnlyNodes closes a connection as soon as the server answers it
// 25006 (read_only_sql_transaction): the node it was opened to while it
// was the primary is a standby now, or a primary being drained read-only.
// pgx closes a connection only on a FATAL error, and the pool would go on
// handing out every connection it holds to that node, each write failing
// the same way until the connection's lifetime ran out (an hour). Closed,
// it is replaced by a new connection, which target_session_attrs=read-write
// in a multi-host DATABASE_URL sends to whichever node is the primary now
// (docs/operations.md, "PostgreSQL failover"). dbstate counts the error as
// the database being unavailable: the request answers 503 and its retry
// finds the new primary.
func leaveReadOnlyNodes(cfg *pgx.ConnConfig) {
	prev := cfg.OnPgError
	cfg.OnPgError = func(c *pgconn.PgConn, e *pgconn.PgError) bool {
		if e.Code == readOnlySQLTransaction {
			return false
		}
		return prev == nil || prev(c, e)
	}
}

// OpenPool opens a pool on db.URL whose queries are traced, configured for
// its pooler (Config.PoolConfig). It does not connect: a process started
// while the database is down comes up, and its pool connects once it is
// back.
func OpenPool(ctx context.Context, db Config, tel *telemetry.Telemetry) (*pgxpool.Pool, error) {
	cfg, err := db.PoolConfig()
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = exchangeTracer{otelpgx.NewTracer(
		otelpgx.WithTracerProvider(tel.Tracer),
		otelpgx.WithMeterProvider(tel.Meter),
		// Span names are the trimmed SQL by default (WithTrimSQLInSpanName
		// is deprecated for that reason).
		// Parameters carry keys and amounts, never logged: see the README.
		otelpgx.WithDisableConnectionDetailsInAttributes(),
		// A span per pool acquire doubled the SQL spans of a request
		// (every transaction and every statement on the pool acquires)
		// and told nothing the statement spans do not: make bench's
		// instrumentation overhead counts every span's export.
		otelpgx.WithDisableAcquireTracer(),
	)}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database: %w", err)
	}
	return pool, nil
}

// exchangeTracer is otelpgx's tracer with one span per batch, not one more
// per statement in it. The phase engine sends each transaction as a batch
// (phases, pipeline.go): one span per exchange with the database says
// what a trace needs (how long the transaction waited on it), and the
// statement spans under it, several per request, were most of the spans
// a sampled request exported. A batch's errors still count, at its end.
type exchangeTracer struct{ *otelpgx.Tracer }

func (exchangeTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// autovacuumSQL reads the server's autovacuum setting.
const autovacuumSQL = `SELECT current_setting('autovacuum')::bool`

// AutovacuumOff reports whether the server at url runs without autovacuum.
// Such a server never refreshes the planner's statistics by itself, and
// PlanCacheModeDefault plans each statement once per connection: a plan
// made while a table was empty and never analyzed (a new database, say)
// is kept until someone runs ANALYZE, and one such plan looked a charge
// up by walking all of its tenant's charges (docs/operations.md). `api
// migrate` warns when it finds the setting off.
func AutovacuumOff(ctx context.Context, url string) (bool, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	var on bool
	if err := conn.QueryRow(ctx, autovacuumSQL).Scan(&on); err != nil {
		return false, fmt.Errorf("autovacuum setting: %w", err)
	}
	return !on, nil
}
