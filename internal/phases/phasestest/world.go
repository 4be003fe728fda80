// Package phasestest is what tests and examples of the engine share: a
// migrated database with a tenant and an engine on it, other processes at
// a later database clock, and crash hooks.
package phasestest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// Lease is the lease of a World's keys. An engine Later by more has seen
// every lease of the world's engine run out.
const Lease = time.Minute

// World is a fresh migrated database with one tenant, and an engine on it.
type World struct {
	// URL is the database's connection string.
	URL string
	// Pool is the engine's pool. Its database clock stands at T0.
	Pool   *pgxpool.Pool
	T0     time.Time
	Keys   *idempotency.Store
	Engine *phases.Engine
	// Tenant is the tenant every request of the world runs for.
	Tenant int64

	closers []func() error
}

// Start opens a World for an example or a program. Close ends it.
func Start(ctx context.Context, cfg phases.Config) (_ *World, err error) {
	url, drop, err := testdb.Create(ctx)
	if err != nil {
		return nil, err
	}
	w := &World{URL: url, T0: time.Now().UTC().Truncate(time.Second), closers: []func() error{drop}}
	defer func() {
		if err != nil {
			err = errors.Join(err, w.Close())
		}
	}()
	if w.Keys, err = idempotency.NewStore(idempotency.Config{Lease: Lease}); err != nil {
		return nil, err
	}
	if w.Pool, err = w.pool(ctx, 0); err != nil {
		return nil, err
	}
	if err := w.Pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('phasestest') RETURNING id`).Scan(&w.Tenant); err != nil {
		return nil, fmt.Errorf("tenant: %w", err)
	}
	if w.Engine, err = w.engine(w.Pool, cfg); err != nil {
		return nil, err
	}
	return w, nil
}

// New is Start for a test, ended with it.
func New(t testing.TB, cfg phases.Config) *World {
	t.Helper()
	w, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("phasestest: %v", err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("phasestest: %v", err)
		}
	})
	return w
}

// Later returns another process's engine, whose database clock stands
// offset after T0. Past Lease, it finds the leases of the world's engine
// run out and takes their keys over.
func (w *World) Later(ctx context.Context, offset time.Duration, cfg phases.Config) (*phases.Engine, error) {
	pool, err := w.pool(ctx, offset)
	if err != nil {
		return nil, err
	}
	return w.engine(pool, cfg)
}

// Close waits for the engines' background work, closes the pools and
// drops the database.
func (w *World) Close() error {
	var errs []error
	for i := len(w.closers) - 1; i >= 0; i-- {
		errs = append(errs, w.closers[i]())
	}
	w.closers = nil
	return errors.Join(errs...)
}

// pool opens a pool whose database clock stands offset after T0
// (phasepay.now, migrations/00002).
func (w *World) pool(ctx context.Context, offset time.Duration) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(w.URL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.RuntimeParams["phasepay.now"] = w.T0.Add(offset).Format(time.RFC3339Nano)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() error { pool.Close(); return nil })
	return pool, nil
}

// engine opens an engine on pool, waited for when the world closes.
func (w *World) engine(pool *pgxpool.Pool, cfg phases.Config) (*phases.Engine, error) {
	e, err := phases.New(pool, w.Keys, cfg)
	if err != nil {
		return nil, err
	}
	w.closers = append(w.closers, func() error { e.Wait(); return nil })
	return e, nil
}
