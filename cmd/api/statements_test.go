package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testsignal"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// statementLoad drives a running api with a few workers, each living one
// payment after another (new charge, its replay, capture, refund, read),
// and counts the answers by status, split at mark: answers before it and
// answers after it.
type statementLoad struct {
	b       *testBundle
	workers int

	mu     sync.Mutex
	before map[int]int
	after  map[int]int
	// failures keeps a few bodies of unexpected answers for the report.
	failures []string
	marked   atomic.Bool
	seq      atomic.Int64
	// lived counts each worker's payments that ran every step.
	lived map[int]int
}

// startStatementLoad runs the load until the returned stop is called.
func startStatementLoad(t *testing.T, b *testBundle, workers int) (*statementLoad, func()) {
	t.Helper()
	l := &statementLoad{b: b, workers: workers, before: map[int]int{}, after: map[int]int{}, lived: map[int]int{}}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				l.life(ctx, w)
			}
		})
	}
	return l, func() { cancel(); wg.Wait() }
}

// mark starts counting answers as "after".
func (l *statementLoad) mark() { l.marked.Store(true) }

func (l *statementLoad) record(ctx context.Context, what string, r response, err error) bool {
	if err != nil {
		// A request cut off by the end of the load is not an answer.
		if ctx.Err() != nil {
			return false
		}
		r.status = -1
		r.body = []byte(err.Error())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	counts := l.before
	if l.marked.Load() {
		counts = l.after
	}
	counts[r.status]++
	if (r.status >= 500 || r.status < 0) && len(l.failures) < 10 {
		l.failures = append(l.failures, fmt.Sprintf("%s: %d %s", what, r.status, r.body))
	}
	return r.status >= 200 && r.status < 300
}

// life is one payment: every step that fails ends it.
func (l *statementLoad) life(ctx context.Context, worker int) {
	key := fmt.Sprintf("w%d-%d", worker, l.seq.Add(1))
	body := []byte(`{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`)
	post := func(path, key string, body []byte) (response, error) {
		return l.b.send(ctx, http.MethodPost, path, map[string]string{"Idempotency-Key": key}, body, false)
	}
	r, err := post("/v1/charges", key, body)
	if !l.record(ctx, "charge", r, err) {
		return
	}
	var c struct{ ID string }
	if json.Unmarshal(r.body, &c) != nil {
		return
	}
	r, err = post("/v1/charges", key, body)
	if !l.record(ctx, "replay", r, err) {
		return
	}
	r, err = post("/v1/charges/"+c.ID+"/capture", key+"-capture", []byte(`{}`))
	if !l.record(ctx, "capture", r, err) {
		return
	}
	r, err = post("/v1/refunds", key+"-refund", []byte(`{"charge":"`+c.ID+`","amount":300}`))
	if !l.record(ctx, "refund", r, err) {
		return
	}
	r, err = l.b.send(ctx, http.MethodGet, "/v1/charges/"+c.ID, nil, nil, false)
	if l.record(ctx, "read", r, err) {
		l.mu.Lock()
		l.lived[worker]++
		l.mu.Unlock()
	}
}

// everyWorkerLived reports whether every worker has run a whole payment,
// so has prepared every statement of one on its connections.
func (l *statementLoad) everyWorkerLived() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.lived) == l.workers
}

// requireRecovered checks the pitfall's two promises: no answer but a 2xx
// or a retryable 503 while the change happened, and nothing but 2xx after
// mark, on the same api process.
func (l *statementLoad) requireRecovered(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	t.Logf("answers while it happened: %v; after: %v", l.before, l.after)
	for status := range l.before {
		require.True(t, status/100 == 2 || status == http.StatusServiceUnavailable,
			"answered %d while it happened (only 2xx and a retryable 503 may be): %v\n%v", status, l.before, l.failures)
	}
	for status := range l.after {
		require.Equal(t, 2, status/100, "answered %d after it: %v\n%v", status, l.after, l.failures)
	}
	require.Positive(t, l.after[http.StatusOK]+l.after[http.StatusCreated], "no request ran after the change")
}

// statementsForgotten runs load against an api while change acts on its
// database, lets it settle, and requires recovery.
func statementsForgotten(t *testing.T, change func(ctx context.Context, b *testBundle, m *Main)) {
	t.Helper()
	var m *Main
	b := setup(t, func(mm *Main) {
		m = mm
		// The shared test server has 100 connections for every package
		// running at once: as many as the load keeps busy, and a few more.
		m.Config.DatabaseURL += "&pool_max_conns=8"
	})
	load, stop := startStatementLoad(t, b, 6)
	defer stop()
	testsignal.WaitFor(t, 10*time.Second, load.everyWorkerLived, "a worker never ran a whole payment")
	change(t.Context(), b, m)
	// sleep: load until every connection the change touched is used again; nothing signals which.
	time.Sleep(1500 * time.Millisecond)
	load.mark()
	// sleep: load after the mark, long enough to reach every connection again.
	time.Sleep(1500 * time.Millisecond)
	stop()
	load.requireRecovered(t)
}

// discardAll runs DISCARD ALL on every idle connection of the api's pool,
// as a pooler's reset query or an operator would: the server forgets the
// connection's prepared statements, pgx and the engine do not know.
func discardAll(ctx context.Context, t *testing.T, m *Main) []*pgx.Conn {
	var out []*pgx.Conn
	for _, c := range m.dbPool().AcquireAllIdle(ctx) {
		_, err := c.Conn().PgConn().Exec(ctx, "DISCARD ALL").ReadAll()
		require.NoError(t, err)
		out = append(out, c.Conn())
		c.Release()
	}
	return out
}

// Pitfall: the engine's pipelined transaction kept its own list of the
// statements it had prepared on a connection and never forgot one. After a
// DISCARD ALL (a pooler's reset query, an operator) every later
// transaction on that connection failed with "prepared statement does not
// exist", a 500, until the pool retired the connection up to an hour
// later. Now the first transaction that finds a statement gone answers a
// retryable 503 at most, and the connection prepares again.
func TestDiscardAllOnLiveConnectionsRecovers(t *testing.T) {
	t.Parallel()
	statementsForgotten(t, func(ctx context.Context, b *testBundle, m *Main) {
		// Every connection the load uses, as it comes idle.
		seen := map[*pgx.Conn]bool{}
		testsignal.WaitFor(t, 10*time.Second, func() bool {
			for _, c := range discardAll(ctx, t, m) {
				seen[c] = true
			}
			return len(seen) >= 4
		}, "fewer than 4 of the api's connections discarded")
	})
}

// addColumn adds a column to table online, as a deployment's additive
// migration would while the api serves.
func addColumn(ctx context.Context, t *testing.T, b *testBundle, table string) {
	conn, err := pgx.Connect(ctx, b.dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "ALTER TABLE "+table+" ADD COLUMN pitfall_added text DEFAULT 'x'")
	require.NoError(t, err)
}

// Pitfall: an online additive migration (ALTER TABLE … ADD COLUMN) while
// the api serves must cause no 500 and no lasting failure, whether the
// table is charges or idempotency_keys.
func TestOnlineAddColumnOnChargesRecovers(t *testing.T) {
	t.Parallel()
	statementsForgotten(t, func(ctx context.Context, b *testBundle, _ *Main) { addColumn(ctx, t, b, "charges") })
}

func TestOnlineAddColumnOnIdempotencyKeysRecovers(t *testing.T) {
	t.Parallel()
	statementsForgotten(t, func(ctx context.Context, b *testBundle, _ *Main) { addColumn(ctx, t, b, "idempotency_keys") })
}

// Pitfall: a column type change that changes a prepared statement's
// result type ("cached plan must not change result type") failed every
// later transaction on the connection, as DISCARD ALL did.
func TestColumnTypeChangeRecovers(t *testing.T) {
	t.Parallel()
	statementsForgotten(t, func(ctx context.Context, b *testBundle, _ *Main) {
		conn, err := pgx.Connect(ctx, b.dbURL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "ALTER TABLE charges ALTER COLUMN payment_method TYPE varchar(200)")
		require.NoError(t, err)
	})
}

// Behind a transaction pooler no startup parameter carries the timeouts:
// serve refuses to start, in one line, until `api migrate` made them the
// database's defaults, and migrate itself needs DATABASE_DIRECT_URL.
// (pitfall D6 "Settings that a pooler does not pass on"; the pooler itself
// is not needed to show it: without startup parameters a direct session
// runs without timeouts just the same.)
func TestServeBehindAPoolerNeedsTheSettings(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)
	env := map[string]string{"DATABASE_URL": dbURL, "DATABASE_POOLER": "transaction", "API_ADDR": "127.0.0.1:0",
		"MOCKPSP_ADDR": "127.0.0.1:0", "PSP_URL": PSPEmbedded}
	code, _, stderr := runWithin(t, 30*time.Second, []string{"serve"}, env)
	require.Equal(t, 1, code, "stderr: %s", stderr)
	require.Contains(t, stderr, "statement_timeout is off")
	require.Contains(t, stderr, "api migrate")

	code, _, stderr = runWithin(t, time.Minute, []string{"migrate"}, env)
	require.Equal(t, 2, code, "stderr: %s", stderr)
	require.Contains(t, stderr, "DATABASE_DIRECT_URL")

	env["DATABASE_DIRECT_URL"] = dbURL
	code, _, stderr = runWithin(t, time.Minute, []string{"migrate"}, env)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	var timeout string
	require.NoError(t, testdb.Pool(t, dbURL, time.Time{}).QueryRow(t.Context(),
		`SELECT setting FROM pg_db_role_setting s, unnest(s.setconfig) setting
		  WHERE s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database()) AND setting LIKE 'statement_timeout=%'`).Scan(&timeout))
	require.Equal(t, "statement_timeout=5000", timeout)
}
