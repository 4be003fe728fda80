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
// The lock and the chore share fate (pitfall D8 "Maintenance under a lock
// held on another connection"): the chore runs on the connection that
// holds the lock (Conn), so that whatever ends one ends the other. When
// they lived on two connections (the lock in a transaction on one, the
// chore on the pool's others), a lock whose connection died (a restart of
// its backend, a network cut, pg_terminate_backend) was free for a second
// process while the first one's chore went on: two processes maintaining
// at once.
//
//   - Without a pooler, a run takes a connection out of the pool for itself,
//     takes a session lock on it (pg_try_advisory_lock) and runs the chore
//     on it, outside any transaction (a chore may need to: DETACH …
//     CONCURRENTLY). The connection is closed after the run, which ends
//     its session, the lock and whatever the chore set in it.
//   - Behind a transaction pooler (Config.Pooled) there is no session to
//     hold a lock in: a session lock taken through the pooler stays on a
//     server connection other clients then use, and its unlock runs on
//     another and fails quietly (a WARNING). There every transaction the
//     chore runs takes the lock itself (pg_try_advisory_xact_lock), on the
//     one server connection the pooler gives the transaction, and a
//     statement the chore runs alone runs in such a transaction. No
//     statement of the chore runs without the lock, and none can run
//     outside a transaction (Conn.TransactionsOnly): a DETACH …
//     CONCURRENTLY gives way to the plain DETACH, held to a short
//     lock_timeout.
package maintenance

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
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
	// chore's context ends then, and with it the lock's session (or, behind
	// a pooler, the transaction that holds it). Default TimeoutDefault.
	Timeout time.Duration
	// Logger receives a failed run (Warn; Error only if the database
	// answered). A run cut off by Stop is not logged. Default
	// slog.Default().
	Logger *slog.Logger
	// Pooled says that the pool goes through a transaction pooler
	// (DATABASE_POOLER=transaction): the lock is then taken by every
	// transaction of the chore, not held by a session (see the package
	// comment).
	Pooled bool
}

// Chore is the work, run while the lock is held, on conn, the connection
// that holds it: every statement of the chore goes through conn. R says
// what it did.
type Chore[R any] func(ctx context.Context, conn *Conn) (R, error)

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

// New validates cfg, fills its defaults and returns a Service on pool.
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

// RunOnce runs the chore once if this process gets the lock: ran reports
// whether it did. It does not wait for a run of another process. A run
// whose chore finds the lock taken part-way (behind a pooler, where each
// of its transactions takes it: another process got it between two) ends
// there, not ran, without an error.
func (s *Service[R]) RunOnce(ctx context.Context) (res R, ran bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	defer func() {
		if err != nil {
			s.TestSignals.Failed.Signal(err)
		}
	}()
	var conn *Conn
	if s.cfg.Pooled {
		conn, err = s.lockEachTransaction(ctx)
	} else {
		conn, err = s.lockSession(ctx)
		if conn != nil {
			defer s.endSession(ctx, conn.conn)
		}
	}
	if err != nil {
		return res, false, fmt.Errorf("%s: lock: %w", s.cfg.Name, err)
	}
	if conn == nil {
		s.TestSignals.Skipped.Signal(struct{}{})
		return res, false, nil
	}
	res, err = s.chore(ctx, conn)
	if errors.Is(err, ErrLockTaken) {
		s.TestSignals.Skipped.Signal(struct{}{})
		return res, false, nil
	}
	s.TestSignals.Ran.Signal(res)
	if err != nil {
		return res, true, fmt.Errorf("%s: %w", s.cfg.Name, err)
	}
	return res, true, nil
}

// sessionLockSQL takes the chore's lock for the session, if no one holds
// it.
const sessionLockSQL = `SELECT pg_try_advisory_lock($1)`

// lockSession takes a connection out of the pool for the run and the
// lock on it: the Conn the chore runs on, or nil when another process
// holds the lock. The caller closes the connection after the run.
func (s *Service[R]) lockSession(ctx context.Context) (*Conn, error) {
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// The pool's no more: a session that holds a lock, and settings the
	// chore may raise, must never serve anyone else.
	conn := pooled.Hijack()
	var locked bool
	if err := conn.QueryRow(ctx, sessionLockSQL, s.cfg.LockID).Scan(&locked); err != nil || !locked {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return &Conn{conn: conn}, nil
}

// sessionUnlockSQL gives the chore's session lock up.
const sessionUnlockSQL = `SELECT pg_advisory_unlock($1)`

// endSession ends the run's session, and the lock with it: unlocked first,
// so that the lock is free when RunOnce returns (a closed connection's
// backend lets its locks go a moment later), then closed, which would
// release it anyway, with whatever the chore set in the session.
func (s *Service[R]) endSession(ctx context.Context, conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, sessionUnlockSQL, s.cfg.LockID)
	_ = conn.Close(ctx)
}

// lockEachTransaction is the Conn of a run behind a transaction pooler:
// one whose every transaction takes the lock. A first transaction takes it
// alone, so that a run that finds it taken is skipped before it starts;
// nil then.
func (s *Service[R]) lockEachTransaction(ctx context.Context) (*Conn, error) {
	conn := &Conn{pool: s.pool, lockID: s.cfg.LockID}
	tx, err := conn.Begin(ctx)
	if errors.Is(err, ErrLockTaken) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return conn, tx.Rollback(ctx)
}
