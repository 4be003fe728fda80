package phases

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// A toy operation, POST /v1/things/{id}/poke {"n": positive}, that answers
// at once, so that these tests see only what the engine does with a
// request before and instead of running it.

const pokePattern = "/v1/things/{id}/poke"

func pokePath(id string) string { return "/v1/things/" + id + "/poke" }

type pokeParams struct {
	N int `json:"n"`
}

// rawWorld is one test's engine, the statements its pool sends and the
// parses and runs of its requests.
type rawWorld struct {
	url        string
	t0         time.Time
	store      *idempotency.Store
	tenant     int64
	statements atomic.Int64
	parses     atomic.Int64
	runs       atomic.Int64
}

// statementCounter counts the statements a pool sends, batched or not.
type statementCounter struct{ n *atomic.Int64 }

func (c statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	c.n.Add(1)
}
func (statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func setupRaw(t *testing.T) *rawWorld {
	t.Helper()
	w := &rawWorld{url: testdb.NewURL(t), t0: time.Now().UTC().Truncate(time.Second)}
	var err error
	w.store, err = idempotency.NewStore(idempotency.Config{Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, w.pool(t, 0).QueryRow(context.Background(),
		`INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&w.tenant))
	return w
}

// pool is a pool whose database clock stands offset after t0, counting
// its statements.
func (w *rawWorld) pool(t *testing.T, offset time.Duration) *pgxpool.Pool {
	return testdb.Pool(t, w.url, w.t0.Add(offset), func(cfg *pgxpool.Config) {
		cfg.ConnConfig.Tracer = statementCounter{&w.statements}
	})
}

// engine is an engine (a process) on pool with the poke operation.
func (w *rawWorld) engine(t *testing.T, pool *pgxpool.Pool) (*Engine, *Operation[struct{}]) {
	return w.engineWith(t, pool, Config{})
}

// engineWith is engine with cfg (a crash hook, say).
func (w *rawWorld) engineWith(t *testing.T, pool *pgxpool.Pool, cfg Config) (*Engine, *Operation[struct{}]) {
	// One commit per phase: the toy's one phase, to done, is not folded
	// into the claim (an operation's first foreign call always comes
	// before done).
	cfg.OneCommitPerPhase = true
	e, err := New(pool, w.store, cfg)
	require.NoError(t, err)
	t.Cleanup(e.Wait)
	op := w.op("things.poke", Phase[struct{}]{To: Done,
		Commit: func(_ context.Context, _ *Tx, run *Run[struct{}]) (Next, error) {
			w.runs.Add(1)
			id := Segment(pokePattern, run.Request().Path, "id")
			return Respond(Response{Status: 201, ContentType: "application/json", Body: []byte(`{"poked":"` + id + `"}`)}), nil
		}})
	Register(e, op)
	return e, op
}

// op is a toy operation named name, POST /v1/things/{id}/poke, with phases.
func (w *rawWorld) op(name string, phases ...Phase[struct{}]) *Operation[struct{}] {
	return &Operation[struct{}]{
		Name: name, Method: "POST", Path: pokePattern, Parse: w.parse,
		Load:   func(context.Context, *Tx, *Run[struct{}]) (struct{}, error) { return struct{}{}, nil },
		Phases: phases,
	}
}

// parse is the toy operations' Parse, whose parses are counted.
func (w *rawWorld) parse(path string, b []byte) (Request, error) {
	w.parses.Add(1)
	var p pokeParams
	if err := json.Unmarshal(b, &p); err != nil || p.N <= 0 {
		return Request{}, fmt.Errorf("n must be a positive integer")
	}
	return NewRequest("POST", path, p)
}

// errCrash stops a run at a crash point, as a dead process would.
var errCrash = errors.New("crashed")

// crashAt is phasestest.CrashAt, which this package's own tests cannot
// import.
func crashAt(point CrashPoint) func(context.Context, CrashPoint) error {
	return func(_ context.Context, at CrashPoint) error {
		if at == point {
			return errCrash
		}
		return nil
	}
}

// delta runs fn and returns how many statements and parses it cost.
func (w *rawWorld) delta(fn func()) (statements, parses int64) {
	s, p := w.statements.Load(), w.parses.Load()
	fn()
	return w.statements.Load() - s, w.parses.Load() - p
}

// A retry of a finished request with its first attempt's bytes is answered
// by one read of its key and no parse. The same request encoded otherwise
// is a replay from that read, parsed. A different body is a mismatch, and
// an invalid one refused, each after that one read. Nothing runs again.
func TestReplayOfTheSameBytesIsOneReadWithoutParsing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	e, op := w.engine(t, w.pool(t, 0))

	first, err := Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.NoError(t, err)
	require.Equal(t, OutcomeNew, first.Outcome)
	require.EqualValues(t, 1, w.parses.Load())

	var res Result
	statements, parses := w.delta(func() { res, err = Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":1}`))) })
	require.NoError(t, err)
	require.Equal(t, Result{Response: first.Response, Outcome: OutcomeReplay}, res)
	require.EqualValues(t, 1, statements, "one read of the key")
	require.Zero(t, parses, "the stored canonical bytes are not parsed again")

	statements, parses = w.delta(func() { res, err = Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte("{ \"n\": 1 }\n"))) })
	require.NoError(t, err)
	require.Equal(t, Result{Response: first.Response, Outcome: OutcomeReplay}, res, "re-encoded, the same request")
	require.EqualValues(t, 1, statements, "the read made before parsing is the one decided on")
	require.EqualValues(t, 1, parses)

	statements, parses = w.delta(func() { _, err = Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":2}`))) })
	require.ErrorIs(t, err, idempotency.ErrMismatch)
	require.EqualValues(t, 1, statements)
	require.EqualValues(t, 1, parses)

	statements, _ = w.delta(func() { _, err = Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":0}`))) })
	var perr *ParseError
	require.ErrorAs(t, err, &perr, "an invalid body is refused whatever its key holds")
	require.EqualValues(t, 1, statements, "and claims nothing")

	require.EqualValues(t, 1, w.runs.Load())
}

// The raw fingerprint covers the path: the same key and the same bytes
// sent to another object's path are another request (422), which only the
// parsed request's fingerprint may decide.
func TestRawReplayOnAnotherPathIsAMismatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	e, op := w.engine(t, w.pool(t, 0))
	_, err := Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.NoError(t, err)
	_, parses := w.delta(func() { _, err = Do(ctx, e, op, w.tenant, "k", pokePath("b"), AsSent([]byte(`{"n":1}`))) })
	require.ErrorIs(t, err, idempotency.ErrMismatch)
	require.EqualValues(t, 1, parses, "not answered before parsing")
	require.EqualValues(t, 1, w.runs.Load())
}

// A key this process has seen that is not finished behaves as it did. Held
// by a live lease, it gets 409 through the claim. Abandoned and due, it is
// taken over and run. Released until its next attempt, it is told to wait,
// from the one read and without parsing.
func TestSeenUnfinishedKeyBehavesAsBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	then := w.pool(t, 0)
	e, op := w.engine(t, then)
	req, err := w.parse(pokePath("a"), []byte(`{"n":1}`))
	require.NoError(t, err)
	claimKey := func(key string) *idempotency.Lease {
		t.Helper()
		var rec idempotency.Record
		require.NoError(t, pgx.BeginFunc(ctx, then, func(tx pgx.Tx) error {
			rec, _, err = w.store.Claim(ctx, tx, idempotency.ClaimParams{TenantID: w.tenant, Key: key, Request: req})
			return err
		}))
		e.hints.add(w.tenant, key, time.Time{})
		return w.store.LeaseOf(rec)
	}

	claimKey("held")
	_, parses := w.delta(func() { _, err = Do(ctx, e, op, w.tenant, "held", pokePath("a"), AsSent([]byte(`{"n":1}`))) })
	require.ErrorIs(t, err, idempotency.ErrInProgress)
	require.EqualValues(t, 1, parses, "the claim needs the parsed request")

	lease := claimKey("released")
	_, err = lease.Release(ctx, then, errors.New("psp unavailable"), 0)
	require.NoError(t, err)
	_, parses = w.delta(func() { _, err = Do(ctx, e, op, w.tenant, "released", pokePath("a"), AsSent([]byte(`{"n":1}`))) })
	var wait *idempotency.WaitError
	require.ErrorAs(t, err, &wait)
	require.Zero(t, parses)

	later, laterOp := w.engine(t, w.pool(t, 2*time.Minute))
	for _, key := range []string{"held", "released"} {
		later.hints.add(w.tenant, key, time.Time{})
		res, err := Do(ctx, later, laterOp, w.tenant, key, pokePath("a"), AsSent([]byte(`{"n":1}`)))
		require.NoError(t, err, key)
		require.Equal(t, OutcomeTakeover, res.Outcome, key)
		require.Equal(t, `{"poked":"a"}`, string(res.Response.Body))
	}
	require.EqualValues(t, 2, w.runs.Load())
}

// The key's day, which the claim read, is remembered with its hint, and a
// retry reads that day's partition: one read. A wrong day (the hint of a
// key whose partition is gone, or never was) costs the retry one more read
// and the same answer, and is corrected for the next.
func TestReplayReadsTheDayTheHintKnows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	w := setupRaw(t)
	e, op := w.engine(t, w.pool(t, 0))
	first, err := Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.NoError(t, err)
	today := w.t0.Truncate(24 * time.Hour)
	d, ok := e.hints.seen(w.tenant, "k")
	require.True(t, ok)
	require.Equal(t, today, d, "the claim's day")

	var res Result
	statements, _ := w.delta(func() { res, err = Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":1}`))) })
	require.NoError(t, err)
	require.Equal(t, Result{Response: first.Response, Outcome: OutcomeReplay}, res)
	require.EqualValues(t, 1, statements)

	for _, wrong := range []time.Time{today.AddDate(0, 0, -400), today.AddDate(0, 0, 1)} {
		e.hints.add(w.tenant, "k", wrong)
		statements, _ = w.delta(func() { res, err = Do(ctx, e, op, w.tenant, "k", pokePath("a"), AsSent([]byte(`{"n":1}`))) })
		require.NoError(t, err)
		require.Equal(t, Result{Response: first.Response, Outcome: OutcomeReplay}, res)
		require.EqualValues(t, 2, statements, "the wrong day, then the heads")
		d, _ = e.hints.seen(w.tenant, "k")
		require.Equal(t, today, d, "corrected")
	}
	require.EqualValues(t, 1, w.runs.Load())
}
