package bench

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// countedConn is a connection to a new test database through a wire
// counter of its own.
func countedConn(t *testing.T) (*wireCounter, *pgx.Conn) {
	t.Helper()
	dbURL := testdb.NewURL(t)
	w, err := startWireCounter(pgHost(dbURL))
	require.NoError(t, err)
	t.Cleanup(w.Close)
	via, err := viaWireCounter(dbURL, w.Addr())
	require.NoError(t, err)
	conn, err := pgx.Connect(context.Background(), via)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return w, conn
}

// The round-trip count is measured on the wire, so it must count
// exchanges, not statements: a pipelined batch is one, a transaction whose
// BEGIN, statement and COMMIT each wait for their answer is three.
func TestWireCounterCountsExchangesNotStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, conn := countedConn(t)

	_, err := conn.Exec(ctx, `SELECT 1`) // prepares and caches the statement
	require.NoError(t, err)

	trips := func(f func()) int64 {
		before := w.Trips()
		f()
		return w.Trips() - before
	}
	require.EqualValues(t, 1, trips(func() {
		_, err := conn.Exec(ctx, `SELECT 1`)
		require.NoError(t, err)
	}), "one statement")
	batch := func() {
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(`SELECT 1`)
		b.Queue(`COMMIT`)
		require.NoError(t, conn.SendBatch(ctx, b).Close())
	}
	// The first time, pgx describes the batch's new statements before
	// sending it: one more exchange, which the counter sees.
	require.EqualValues(t, 2, trips(batch), "a batch of statements not yet prepared")
	require.EqualValues(t, 1, trips(batch), "a batch: BEGIN, a statement and COMMIT pipelined")
	require.EqualValues(t, 3, trips(func() {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `SELECT 1`)
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctx))
	}), "BEGIN, a statement and COMMIT one after the other")
}

// Statements are counted apart from round trips: a pipelined batch of
// three is one round trip and three statements; a simple query is one; a
// statement's parameters, however long and whatever bytes they hold, are
// not mistaken for messages, nor is a message cut across reads.
func TestWireCounterCountsStatements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w, conn := countedConn(t)

	statements := func(f func()) int64 {
		before := w.Statements()
		f()
		return w.Statements() - before
	}
	// Long enough to span reads, made of protocol-looking bytes.
	big := []byte(strings.Repeat("E\x00\x00\x00\x04Q", 40_000))
	require.EqualValues(t, 1, statements(func() {
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT length($1::bytea)`, big).Scan(&n))
		require.Equal(t, len(big), n)
	}), "one statement with a long parameter")
	require.EqualValues(t, 3, statements(func() {
		b := &pgx.Batch{}
		b.Queue(`BEGIN`)
		b.Queue(`SELECT length($1::bytea)`, big)
		b.Queue(`COMMIT`)
		require.NoError(t, conn.SendBatch(ctx, b).Close())
	}), "a batch of three")
	require.EqualValues(t, 1, statements(func() {
		_, err := conn.Exec(ctx, `SELECT 1`, pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err)
	}), "a simple query")
}

// The bare baselines do what the issue defines and nothing more: a new
// charge is two single-statement commits around one PSP call (2 round
// trips), a replay one primary-key read (1) whose answer is the stored
// bytes. They run as the benchmark runs them, a process of their own
// (startBare), which ends cleanly on stop.
func TestBareBaselinesDoTheIrreducibleWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	mock, err := mockpsp.New(mockpsp.Faults{})
	require.NoError(t, err)
	pspSrv := httptest.NewServer(mock)
	t.Cleanup(pspSrv.Close)
	w, err := startWireCounter(pgHost(dbURL))
	require.NoError(t, err)
	t.Cleanup(w.Close)
	via, err := viaWireCounter(dbURL, w.Addr())
	require.NoError(t, err)
	e := &env{cfg: Config{BareCmd: testBareCmd(t)}, hc: &http.Client{Timeout: 10 * time.Second}, apiKey: "unused"}
	bare, err := e.startBare(ctx, via, pspSrv.URL)
	require.NoError(t, err)
	t.Cleanup(bare.stop)
	// Warm: connections and prepared statements.
	code, err := e.send(ctx, bare.NewURL(), request{"warm", []byte(visa)})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	code, err = e.send(ctx, bare.ReplayURL(), request{"warm", []byte(visa)})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)

	t0 := w.Trips()
	code, err = e.send(ctx, bare.NewURL(), request{"k1", []byte(visa)})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	require.EqualValues(t, 2, w.Trips()-t0, "bare-new: INSERT, UPDATE")
	require.Len(t, mock.Authorizations(), 2, "one PSP call per new charge")

	t1 := w.Trips()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, bare.ReplayURL()+"/v1/charges", bytes.NewReader([]byte(visa)))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := e.hc.Do(req)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.EqualValues(t, 1, w.Trips()-t1, "bare-replay: one read")
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	require.JSONEq(t, `{"id":"ch_k1","amount":1000,"currency":"usd","status":"authorized","psp_reference":"`+
		mock.Authorizations()[1].ID+`","decline_code":null}`, string(body))

	bare.stop()
	require.True(t, bare.cmd.ProcessState.Success(), "bench bare ends cleanly on SIGTERM: %v", bare.cmd.ProcessState)
	_, err = e.send(ctx, bare.NewURL(), request{"k2", []byte(visa)})
	require.Error(t, err, "nothing listens after stop")
}

// A ratio of medians taken over alternating runs: each figure is the median
// of its own runs, so one run on a slow-disk minute does not decide it.
func TestMedianTakesEachFigureOnItsOwn(t *testing.T) {
	t.Parallel()
	rs := []LoadResult{
		{Clients: 8, Requests: 10, PerSec: 100, Latency: Latency{P50: 3}, Statuses: map[int]int{201: 10}},
		{Clients: 8, Requests: 20, PerSec: 300, Latency: Latency{P50: 1}, Statuses: map[int]int{201: 20}},
		{Clients: 8, Requests: 30, PerSec: 200, Latency: Latency{P50: 9}, Statuses: map[int]int{201: 29, 409: 1}},
	}
	m := median(rs)
	require.InDelta(t, 200.0, m.PerSec, 1e-9)
	require.InDelta(t, 3.0, m.Latency.P50, 1e-9)
	require.Equal(t, 60, m.Requests)
	require.Equal(t, map[int]int{201: 59, 409: 1}, m.Statuses)
	require.InDelta(t, 200.0, median(rs[:2]).PerSec, 1e-9, "an even count averages the middle two")

	var order []string
	a, b := alternate(2, func(int) LoadResult { order = append(order, "A"); return rs[0] },
		func(int) LoadResult { order = append(order, "B"); return rs[1] })
	require.Equal(t, []string{"A", "B", "A", "B"}, order)
	require.InDelta(t, 100.0, a.PerSec, 1e-9)
	require.InDelta(t, 300.0, b.PerSec, 1e-9)
}
