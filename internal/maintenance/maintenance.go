// Package maintenance runs a chore that one process at a time must do, on
// a schedule: the partition maintenance of the keys (internal/reaper) and
// of the events (internal/webhooks). Every reaper runs both services; the
// advisory lock of each lets one of them do the chore at a time.
//
// A Service has the shape of River's maintenance services: a Config whose
// fields say their units and defaults, Start that returns at once and Stop
// that waits (safe twice), a ticker with an initial tick, a runOnce
// (RunOnce here, for the owning package's tests) that returns what it did,
// and test signals a test waits on instead of sleeping.
//
// The lock is transaction-scoped: a run opens a transaction on a
// connection of its own, takes pg_try_advisory_xact_lock there, runs the
// chore on the pool's other connections, and ends the transaction, which
// releases the lock, whatever happened (a lost connection releases it
// too). A session lock, as this once was, cannot work behind a transaction
// pooler: the lock is taken on one server connection and the unlock runs
// on whichever is free, so the lock stays held, by a server connection
// other clients now use, and the unlock fails quietly (a WARNING).
package maintenance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/testsignal"
)

// Defaults of Config.
const (
	IntervalDefault = time.Minute
	TimeoutDefault  = 30 * time.Second
)

// Config configures a Service.
type Config struct {
	// Name names the chore in logs and errors ("key partition
	// maintenance"). Required.
	Name string
	// LockID is the advisory lock key that lets one process at a time do
	// the chore (held transaction-scoped, see the package comment).
	// Required; every chore has its own.
	LockID int64
	// Interval is the pause between two runs of this service; the first
	// is at Start. Default IntervalDefault.
	Interval time.Duration
	// Timeout bounds one run, from taking the lock to releasing it: the
	// chore's context ends then, and the lock's transaction is ended.
	// Default TimeoutDefault.
	Timeout time.Duration
	// Logger receives a failed run (Warn; Error only if the database
	// answered). A run cut off by Stop is not logged. Default
	// slog.Default().
	Logger *slog.Logger
}

// Chore is the work, run while the lock is held. It runs on the pool's
// connections, never the lock's (that one is inside the lock's
// transaction, and a chore may need to run outside one: DETACH …
// CONCURRENTLY). R says what it did.
type Chore[R any] func(ctx context.Context) (R, error)

// Service runs a Chore every Interval, in one process at a time.
type Service[R any] struct {
	cfg   Config
	pool  *pgxpool.Pool
	chore Chore[R]
	log   *slog.Logger

	// TestSignals are no-ops until a test calls their Init (before Start).
	TestSignals TestSignals[R]

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// TestSignals are the points a test may wait on.
type TestSignals[R any] struct {
	// Ran: a run held the lock and the chore returned (its result, even
	// with an error).
	Ran testsignal.Signal[R]
	// Skipped: a run found another process holding the lock.
	Skipped testsignal.Signal[struct{}]
	// Failed: a run failed (the chore's error, or the lock's).
	Failed testsignal.Signal[error]
}

// New validates cfg, fills its defaults and returns a Service on pool,
// which must allow two connections at least: the lock's and the chore's.
func New[R any](pool *pgxpool.Pool, cfg Config, chore Chore[R]) (*Service[R], error) {
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	cfg.Timeout = cmp.Or(cfg.Timeout, TimeoutDefault)
	switch {
	case cfg.Name == "":
		return nil, errors.New("maintenance: Name is required")
	case cfg.LockID == 0:
		return nil, fmt.Errorf("%s: LockID is required", cfg.Name)
	case chore == nil:
		return nil, fmt.Errorf("%s: a chore is required", cfg.Name)
	case cfg.Interval < 0 || cfg.Timeout < 0:
		return nil, fmt.Errorf("%s: negative interval or timeout", cfg.Name)
	case pool != nil && pool.Config().MaxConns < 2:
		return nil, fmt.Errorf("%s: the pool needs 2 connections at least (the lock's and the chore's), has %d", cfg.Name, pool.Config().MaxConns)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Service[R]{cfg: cfg, pool: pool, chore: chore, log: cfg.Logger}, nil
}

// Start runs the service in the background until ctx ends or Stop is
// called: a run at once, then one every Interval. It returns at once; a
// second Start while running is an error.
func (s *Service[R]) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done != nil {
		return fmt.Errorf("%s: already started", s.cfg.Name)
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			switch _, _, err := s.RunOnce(ctx); {
			case err == nil, errors.Is(err, context.Canceled):
			case dbstate.Unavailable(err):
				s.log.WarnContext(ctx, s.cfg.Name+": database unavailable; retried next run", "error", err.Error(), "retry_in", s.cfg.Interval.String())
			default:
				s.log.ErrorContext(ctx, s.cfg.Name+" failed; retried next run", "error", err.Error(), "retry_in", s.cfg.Interval.String())
			}
			t.Reset(s.cfg.Interval)
		}
	}()
	return nil
}

// Stop stops the service and waits for a run under way (bounded by
// Timeout). Safe to call twice, and before Start.
func (s *Service[R]) Stop() {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.cancel, s.done = nil, nil
	s.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// lockSQL takes the chore's lock for the transaction, if no one holds it,
// and lets the transaction sit idle while the chore runs on other
// connections: the pool's idle_in_transaction_session_timeout (30 s) is
// raised to the run's Timeout for this transaction alone (SET LOCAL, which
// a transaction pooler keeps: it lives in the transaction). The
// transaction holds no snapshot while idle (READ COMMITTED) and no lock
// but this one, so nothing waits on it (DETACH … CONCURRENTLY waits for
// the parent table's lockers, not for it).
const lockSQL = `SELECT set_config('idle_in_transaction_session_timeout', $2, true) IS NOT NULL, pg_try_advisory_xact_lock($1)`

// RunOnce runs the chore once if this process gets the lock: ran reports
// whether it did. It does not wait for a run of another process.
func (s *Service[R]) RunOnce(ctx context.Context) (res R, ran bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	defer func() {
		if err != nil {
			s.TestSignals.Failed.Signal(err)
		}
	}()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, false, fmt.Errorf("%s: lock: %w", s.cfg.Name, err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return res, false, fmt.Errorf("%s: lock: %w", s.cfg.Name, err)
	}
	// Ending the transaction releases the lock; a rollback that fails (the
	// connection is lost) releases it with the session.
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // see above
	idle := fmt.Sprintf("%dms", (s.cfg.Timeout + 5*time.Second).Milliseconds())
	var set, locked bool
	if err := tx.QueryRow(ctx, lockSQL, s.cfg.LockID, idle).Scan(&set, &locked); err != nil {
		return res, false, fmt.Errorf("%s: lock: %w", s.cfg.Name, err)
	}
	if !locked {
		s.TestSignals.Skipped.Signal(struct{}{})
		return res, false, nil
	}
	res, err = s.chore(ctx)
	s.TestSignals.Ran.Signal(res)
	if err != nil {
		return res, true, fmt.Errorf("%s: %w", s.cfg.Name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		// The chore is done; the lock went with the transaction anyway.
		return res, true, fmt.Errorf("%s: release the lock: %w", s.cfg.Name, err)
	}
	return res, true, nil
}
