// Package charges is phasepay's payments domain: the charge, and the
// idempotent operations on it, each an operation file whose phases read top
// to bottom (authorize.go: POST /v1/charges). internal/phases runs them: the
// claim, fencing, leases, the outcome classes and the stored answers are
// its, not this package's.
package charges

import (
	"context"
	"net/http"

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

// Config configures a Service: its engine's configuration (a new charge
// costs two commits, four with OneCommitPerPhase).
type Config = phases.Config

// CrashPoint names a moment at which a test may kill a run.
type CrashPoint = phases.CrashPoint

// Outcome says how a request's key was handled (for logs and metrics).
type Outcome = phases.Outcome

// The outcomes of a request that got a response.
const (
	OutcomeNew      = phases.OutcomeNew
	OutcomeReplay   = phases.OutcomeReplay
	OutcomeTakeover = phases.OutcomeTakeover
)

// Result is the final response of a request, new or replayed.
type Result = phases.Result

// Span events: what the key decided, and lost leases.
const (
	EventReplay     = phases.EventReplay
	EventInProgress = phases.EventInProgress
	EventMismatch   = phases.EventMismatch
	EventTakeover   = phases.EventTakeover
	EventLeaseLost  = phases.EventLeaseLost
)

// Service runs the operations on charges.
type Service struct {
	pool   *pgxpool.Pool
	keys   *idempotency.Store
	psp    Authorizer
	engine *phases.Engine
	ids    objectIDs

	authorize, capture, void *phases.Operation[*Charge]
	refund                   *phases.Operation[*Refund]
}

// NewService returns a Service with its operations registered on an engine
// of its own.
func NewService(pool *pgxpool.Pool, keys *idempotency.Store, authorizer Authorizer, cfg Config) (*Service, error) {
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

// Create runs one POST /v1/charges. It returns the final response (new or
// replayed), or an error: idempotency.ErrMismatch, idempotency.ErrInProgress,
// ErrPSPUnavailable, or an internal error. params must be the request that
// req fingerprints; the operation executes req's stored body, which encodes
// params.
func (s *Service) Create(ctx context.Context, tenantID int64, key string, req idempotency.Canonical, _ CreateParams) (Result, error) {
	if err := s.ids.load(ctx, s.pool); err != nil {
		return Result{}, err
	}
	return phases.Do(ctx, s.engine, s.authorize, tenantID, key, req)
}

// Capture runs one POST /v1/charges/{id}/capture (req from
// ParseCaptureRequest). Besides Create's errors: ErrNotFound,
// *ChargePendingError. A capture the charge's state does not allow is a
// stored 400 answer, not an error.
func (s *Service) Capture(ctx context.Context, tenantID int64, key string, req idempotency.Canonical) (Result, error) {
	return do(ctx, s.engine, s.capture, tenantID, key, req)
}

// Void runs one POST /v1/charges/{id}/void (req from ParseVoidRequest), as
// Capture.
func (s *Service) Void(ctx context.Context, tenantID int64, key string, req idempotency.Canonical) (Result, error) {
	return do(ctx, s.engine, s.void, tenantID, key, req)
}

// Refund runs one POST /v1/refunds (req from ParseRefundRequest). Besides
// Create's errors: ErrNotFound (the charge).
func (s *Service) Refund(ctx context.Context, tenantID int64, key string, req idempotency.Canonical) (Result, error) {
	if err := s.ids.load(ctx, s.pool); err != nil {
		return Result{}, err
	}
	return do(ctx, s.engine, s.refund, tenantID, key, req)
}

// ParseError is a request body refused by its parser (a *ValidationError
// or a *jsonbody.Error inside), from the FromBody methods.
type ParseError = phases.ParseError

// CreateFromBody runs one POST /v1/charges from its body as it came
// (phases.DoRaw): a retry of a finished request with its first attempt's
// bytes is answered by one read, without parsing them again; any other body
// is parsed with ParseCreateRequest and run as Create. It returns Create's
// errors, or a *ParseError.
func (s *Service) CreateFromBody(ctx context.Context, tenantID int64, key string, body []byte) (Result, error) {
	if err := s.ids.load(ctx, s.pool); err != nil {
		return Result{}, err
	}
	return doRaw(ctx, s.engine, s.authorize, tenantID, key, Path, body, func(body []byte) (idempotency.Canonical, error) {
		req, _, err := ParseCreateRequest(body)
		return req, err
	})
}

// CaptureFromBody runs one POST /v1/charges/{id}/capture from its body as
// it came, as CreateFromBody; a body is parsed with ParseCaptureRequest.
// Capture's errors, or a *ParseError.
func (s *Service) CaptureFromBody(ctx context.Context, tenantID int64, key, chargeID string, body []byte) (Result, error) {
	return doRaw(ctx, s.engine, s.capture, tenantID, key, pathOf(CapturePath, chargeID), body,
		func(body []byte) (idempotency.Canonical, error) { return ParseCaptureRequest(chargeID, body) })
}

// VoidFromBody runs one POST /v1/charges/{id}/void from its body as it
// came, as CaptureFromBody (ParseVoidRequest).
func (s *Service) VoidFromBody(ctx context.Context, tenantID int64, key, chargeID string, body []byte) (Result, error) {
	return doRaw(ctx, s.engine, s.void, tenantID, key, pathOf(VoidPath, chargeID), body,
		func(body []byte) (idempotency.Canonical, error) { return ParseVoidRequest(chargeID, body) })
}

// RefundFromBody runs one POST /v1/refunds from its body as it came, as
// CreateFromBody (ParseRefundRequest). Refund's errors, or a *ParseError.
func (s *Service) RefundFromBody(ctx context.Context, tenantID int64, key string, body []byte) (Result, error) {
	if err := s.ids.load(ctx, s.pool); err != nil {
		return Result{}, err
	}
	return doRaw(ctx, s.engine, s.refund, tenantID, key, RefundPath, body, func(body []byte) (idempotency.Canonical, error) {
		req, _, err := ParseRefundRequest(body)
		return req, err
	})
}

// do runs op, parsed, and doRaw runs it from its body as it came
// (phases.DoRaw, a POST to path). An operation this service does not have
// (a PSP that cannot settle, see NewService) is phases.ErrNoOperation.
func do[S any](ctx context.Context, e *phases.Engine, op *phases.Operation[S], tenantID int64, key string,
	req idempotency.Canonical) (Result, error) {
	if op == nil {
		return Result{}, phases.ErrNoOperation
	}
	return phases.Do(ctx, e, op, tenantID, key, req)
}

func doRaw[S any](ctx context.Context, e *phases.Engine, op *phases.Operation[S], tenantID int64, key, path string,
	body []byte, parse func([]byte) (idempotency.Canonical, error)) (Result, error) {
	if op == nil {
		return Result{}, phases.ErrNoOperation
	}
	return phases.DoRaw(ctx, e, op, tenantID, key, phases.Raw{Method: http.MethodPost, Path: path, Body: body, Parse: parse})
}

// GetRefund returns a tenant's refund, or ErrRefundNotFound.
func (s *Service) GetRefund(ctx context.Context, tenantID int64, id string) (*Refund, error) {
	return refundByID(ctx, s.pool, tenantID, id)
}

// Resume drives a key this worker has just taken over (a client's retry, or
// the reaper) from its recovery point to done, through whichever of the
// service's operations its request path names.
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
