// Package charges is phasepay's payments domain: the charge, and the
// idempotent operations on it, each an operation file whose phases read top
// to bottom (authorize.go: POST /v1/charges). internal/phases runs them: the
// claim, fencing, leases, the outcome classes and the stored answers are
// its, not this package's.
package charges

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
)

// Authorizer is the PSP as the operations see it (*psp.Client):
// AuthorizeOutcome makes one attempt (its own quick retries and lookups
// included) and classifies the answer; Lookup reads what the PSP holds for
// a charge, for an operator's resolution.
type Authorizer interface {
	AuthorizeOutcome(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error)
	Lookup(ctx context.Context, reference string) ([]psp.Authorization, error)
}

// Service runs the operations on charges: one entry per operation, each
// taking the request's body as it came (phases.AsSent) or already parsed
// (phases.Parsed).
type Service struct {
	pool   *pgxpool.Pool
	keys   *idempotency.Store
	psp    Authorizer
	routes Routes
	engine *phases.Engine
	ids    objectIDs

	authorize, capture, void *phases.Operation[*Charge]
	refund                   *phases.Operation[*Refund]
}

// NewService returns a Service with its operations registered on an engine
// of its own, configured by cfg (a new charge costs two commits, four with
// OneCommitPerPhase).
func NewService(pool *pgxpool.Pool, keys *idempotency.Store, authorizer Authorizer, cfg phases.Config) (*Service, error) {
	engine, err := phases.New(pool, keys, cfg)
	if err != nil {
		return nil, err
	}
	s := &Service{pool: pool, keys: keys, psp: authorizer, engine: engine}
	// Several PSPs (a *routing.Router) route and fail over; any other
	// Authorizer is one PSP, named "default".
	routes, ok := authorizer.(Routes)
	if !ok {
		routes = singleRoute{authorizer}
	}
	s.routes = routes
	s.authorize = authorizeOperation(authorizer, routes, &s.ids)
	phases.Register(engine, s.authorize)
	// Capture, void and refund need a PSP that can do them; every real one
	// (*psp.Client) can. A test's authorizer that cannot leaves them
	// unregistered: they answer phases.ErrNoOperation.
	if o, ok := authorizer.(Operator); ok {
		s.capture, s.void, s.refund = captureOperation(o), voidOperation(o), refundOperation(o, &s.ids)
		phases.Register(engine, s.capture)
		phases.Register(engine, s.void)
		phases.Register(engine, s.refund)
	}
	return s, nil
}

// Create runs one POST /v1/charges. It returns the final response, new or
// replayed, or an error: idempotency.ErrMismatch, idempotency.ErrInProgress,
// *idempotency.WaitError, idempotency.ErrUnresolved, *UnavailableError, a
// *phases.ParseError (a body that does not parse), or an internal error.
func (s *Service) Create(ctx context.Context, tenantID int64, key string, body phases.Body) (phases.Result, error) {
	if err := s.ids.load(ctx, s.pool); err != nil {
		return phases.Result{}, err
	}
	return run(ctx, s.engine, s.authorize, tenantID, key, Path, body)
}

// Capture runs one POST /v1/charges/{id}/capture. Besides Create's errors:
// ErrNotFound, *ChargePendingError. A capture the charge's state does not
// allow is a stored 400 answer, not an error.
func (s *Service) Capture(ctx context.Context, tenantID int64, key, chargeID string, body phases.Body) (phases.Result, error) {
	return run(ctx, s.engine, s.capture, tenantID, key, pathOf(CapturePath, chargeID), body)
}

// Void runs one POST /v1/charges/{id}/void, as Capture.
func (s *Service) Void(ctx context.Context, tenantID int64, key, chargeID string, body phases.Body) (phases.Result, error) {
	return run(ctx, s.engine, s.void, tenantID, key, pathOf(VoidPath, chargeID), body)
}

// Refund runs one POST /v1/refunds. Besides Create's errors: ErrNotFound
// (the charge).
func (s *Service) Refund(ctx context.Context, tenantID int64, key string, body phases.Body) (phases.Result, error) {
	if err := s.ids.load(ctx, s.pool); err != nil {
		return phases.Result{}, err
	}
	return run(ctx, s.engine, s.refund, tenantID, key, RefundPath, body)
}

// run runs op for a POST to path. An operation this service does not have
// (a PSP that cannot settle, see NewService) is phases.ErrNoOperation.
func run[S any](ctx context.Context, e *phases.Engine, op *phases.Operation[S], tenantID int64, key, path string, body phases.Body) (phases.Result, error) {
	if op == nil {
		return phases.Result{}, phases.ErrNoOperation
	}
	return phases.Do(ctx, e, op, tenantID, key, path, body)
}

// GetRefund returns a tenant's refund, or ErrRefundNotFound.
func (s *Service) GetRefund(ctx context.Context, tenantID int64, id string) (*Refund, error) {
	return refundByID(ctx, s.pool, tenantID, id)
}

// Resume drives a key this worker has just taken over (a client's retry, or
// the reaper) from its recovery point to done, through whichever of the
// service's operations its claim named.
func (s *Service) Resume(ctx context.Context, lease *idempotency.Lease) (idempotency.Response, error) {
	if err := s.ids.load(ctx, s.pool); err != nil {
		return idempotency.Response{}, err
	}
	return s.engine.Resume(ctx, lease)
}

// Wait waits until the leases being released in the background are
// released or given up; for shutdown and tests.
func (s *Service) Wait() { s.engine.Wait() }

// Get returns a tenant's charge, or ErrNotFound.
func (s *Service) Get(ctx context.Context, tenantID int64, id string) (*Charge, error) {
	return chargeByID(ctx, s.pool, tenantID, id)
}

// CrashPoints lists the crash points of every operation on charges, each
// once, and those inside a batch of them: where the chaos run may kill a
// worker.
func CrashPoints() []phases.CrashPoint {
	ids := &objectIDs{}
	all := []phases.CrashPoint{phases.CrashInBatch, phases.CrashAfterBatch}
	for _, points := range [][]phases.CrashPoint{
		phases.CrashPoints(authorizeOperation(nil, nil, ids)),
		phases.CrashPoints(captureOperation(nil)),
		phases.CrashPoints(voidOperation(nil)),
		phases.CrashPoints(refundOperation(nil, ids)),
	} {
		for _, p := range points {
			if !slices.Contains(all, p) {
				all = append(all, p)
			}
		}
	}
	return all
}

// BatchStats is the engine's count of batches (phases.Engine.BatchStats).
func (s *Service) BatchStats() phases.BatchStats { return s.engine.BatchStats() }
