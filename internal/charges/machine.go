// Package charges creates charges: POST /v1/charges as an idempotent state
// machine of atomic phases over PostgreSQL, with the PSP call between them.
//
// The state machine of one request, and the transaction that commits each
// arrow (the recovery point is committed with the arrow's effects, fenced by
// the key's lock_version):
//
//	           claim (tx 1)
//	              │
//	              ▼
//	  ┌─────── start ───────┐   tx 1 too: no foreign call between the claim
//	  │ createCharge        │   and the charge row, so they commit together
//	  ▼                     │   (unless Config.OneCommitPerPhase: tx 1b)
//	charge_created          │
//	  │ PSP authorize       │   the foreign call, outside any transaction,
//	  │ (key <charge>:authorize)  under a heartbeat-renewed lease
//	  ▼
//	psp_authorized ─────────┐   tx 2: the PSP's answer on the charge row
//	  │ finish              │   tx 2 too (unless OneCommitPerPhase: tx 2b):
//	  ▼                     │   the response stored for replay, key done
//	done ◀──────────────────┘
//
// A new charge therefore costs two commits; a resumed one starts at its
// recovery point and costs one commit per remaining transaction. A PSP that
// stays unavailable releases the lease at charge_created: the next retry or
// the reaper resumes there and repeats the PSP call with the same PSP key,
// which can never authorize twice.
package charges

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// The recovery points between start and done.
const (
	PointChargeCreated idempotency.RecoveryPoint = "charge_created"
	PointPSPAuthorized idempotency.RecoveryPoint = "psp_authorized"
)

// Path is the request path charges' keys are claimed under; the reaper uses
// it to route a key it takes over back to this package.
const Path = "/v1/charges"

// Authorizer is the PSP as the state machine sees it (*psp.Client):
// AuthorizeOutcome makes one attempt (its own quick retries and lookups
// included) and classifies the answer; Lookup reads what the PSP holds for
// a charge, for an operator's resolution.
type Authorizer interface {
	AuthorizeOutcome(ctx context.Context, req psp.AuthorizeRequest) (psp.Outcome, error)
	Lookup(ctx context.Context, reference string) ([]psp.Authorization, error)
}

// Config configures a Service.
type Config struct {
	// OneCommitPerPhase commits every arrow in a transaction of its own
	// (four commits per new charge) instead of folding the arrows that have
	// no foreign call between them (two). The recovery points are the same
	// either way; only the commit boundaries move. For comparison in
	// benchmarks and for tests that crash between every arrow.
	OneCommitPerPhase bool
	// CrashHook, if set, is called at each crash point (see CrashPoint). If
	// it returns an error the run stops there at once, as if the process had
	// died: no rollback of what committed, no lease release. For tests.
	CrashHook func(ctx context.Context, at CrashPoint) error
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// TracerProvider and MeterProvider default to no-ops.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
}

// CrashPoint names a moment at which a test may kill a run.
type CrashPoint string

// The crash points: after each commit, and after the PSP answered but before
// its answer committed (the lost-response case).
const (
	CrashAfterClaim         CrashPoint = "after_claim"
	CrashAfterChargeCreated CrashPoint = "after_charge_created"
	CrashAfterPSPCall       CrashPoint = "after_psp_call"
	CrashAfterPSPAuthorized CrashPoint = "after_psp_authorized"
)

// Service runs charge requests.
type Service struct {
	pool *pgxpool.Pool
	keys *idempotency.Store
	psp  Authorizer
	cfg  Config
	log  *slog.Logger
	tel  instruments

	background sync.WaitGroup // releaseLater's goroutines
}

// NewService returns a Service.
func NewService(pool *pgxpool.Pool, keys *idempotency.Store, authorizer Authorizer, cfg Config) (*Service, error) {
	tel, err := newInstruments(cfg)
	if err != nil {
		return nil, err
	}
	return &Service{pool: pool, keys: keys, psp: authorizer, cfg: cfg, log: cmpLogger(cfg.Logger), tel: tel}, nil
}

// Outcome says how a request's key was handled (for logs and metrics).
type Outcome string

// The outcomes of a request that got a response.
const (
	OutcomeNew      Outcome = "new"
	OutcomeReplay   Outcome = "replay"
	OutcomeTakeover Outcome = "takeover"
)

// Result is the final response of a request, new or replayed.
type Result struct {
	Response idempotency.Response
	Outcome  Outcome
}

// Create runs one POST /v1/charges. It returns the final response (new or
// replayed), or an error: idempotency.ErrMismatch, idempotency.ErrInProgress,
// ErrPSPUnavailable, or an internal error. params must be the request that
// req fingerprints.
func (s *Service) Create(ctx context.Context, tenantID int64, key string, req idempotency.Canonical, params CreateParams) (_ Result, err error) {
	ctx, span := s.tel.tracer.Start(ctx, "charges.create", trace.WithAttributes(attrTenant.Int64(tenantID)))
	defer func() { endSpan(span, err) }()
	var (
		rec     idempotency.Record
		created bool
		charge  *Charge
	)
	// The fast path of a retry: a finished key, or one claimed for another
	// request, never changes again, so a plain read answers it, with no
	// transaction and no lock; nor does one waiting for its next scheduled
	// attempt or for an operator need a lock to be told so. Anything else
	// goes through the claim.
	if rec, err := s.keys.Lookup(ctx, s.pool, tenantID, key); err == nil {
		switch idempotency.Decide(rec, req.Fingerprint) {
		case idempotency.Replay, idempotency.Mismatch, idempotency.NotDue, idempotency.Unresolved:
			return s.existing(ctx, rec, req.Fingerprint)
		}
	} else if !errors.Is(err, idempotency.ErrNotFound) {
		return Result{}, fmt.Errorf("create charge: %w", err)
	}

	// Transaction 1: the claim, committed before any foreign call so that a
	// duplicate gets 409 at once and the reaper can see the key. Folded into
	// it: start → charge_created.
	claim := idempotency.ClaimParams{TenantID: tenantID, Key: key, Request: req, TraceContext: traceContext(ctx)}
	if !s.cfg.OneCommitPerPhase {
		claim.Point = PointChargeCreated
		claim.ObjectID = newChargeID()
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if rec, created, err = s.keys.Claim(ctx, tx, claim); err != nil || !created || s.cfg.OneCommitPerPhase {
			return err
		}
		// start → charge_created, committed with the claim, which already
		// recorded the point.
		charge, err = s.createCharge(ctx, tx, s.keys.LeaseOf(rec), claim.ObjectID, params, false)
		return err
	})
	if err != nil {
		if created && dbstate.Unavailable(err) {
			// The commit's answer was lost with the database: the claim
			// may have committed, holding the key for a whole lease.
			s.releaseLater(s.keys.LeaseOf(rec), err)
		}
		return Result{}, fmt.Errorf("create charge: %w", dbstate.Wrap(err))
	}
	if !created {
		return s.existing(ctx, rec, req.Fingerprint)
	}
	s.tel.countOutcome(ctx, string(OutcomeNew))
	if err := s.crash(ctx, CrashAfterClaim); err != nil {
		return Result{}, err
	}
	lease := s.keys.LeaseOf(rec)
	point := idempotency.PointStart
	if charge != nil {
		point = PointChargeCreated
	}
	resp, err := s.drive(ctx, lease, point, charge)
	return Result{Response: resp, Outcome: OutcomeNew}, err
}

// existing answers a request whose key was already claimed.
func (s *Service) existing(ctx context.Context, rec idempotency.Record, fp idempotency.Fingerprint) (Result, error) {
	// Two rounds at most: a takeover that loses the race re-reads the key
	// once, and then it is either done (replay) or someone holds it (409).
	for range 2 {
		decision := idempotency.Decide(rec, fp)
		switch decision {
		case idempotency.Mismatch:
			s.tel.countOutcome(ctx, decision.String())
			return Result{}, idempotency.ErrMismatch
		case idempotency.Replay:
			s.tel.countOutcome(ctx, decision.String())
			return Result{Response: *rec.Response, Outcome: OutcomeReplay}, nil
		case idempotency.InProgress:
			s.tel.countOutcome(ctx, decision.String())
			return Result{}, idempotency.ErrInProgress
		case idempotency.NotDue:
			s.tel.countOutcome(ctx, decision.String())
			return Result{}, &idempotency.WaitError{RetryAfter: rec.RetryAfter, ObjectID: rec.ObjectID}
		case idempotency.Unresolved:
			s.tel.countOutcome(ctx, decision.String())
			return Result{}, fmt.Errorf("key %q: %w", rec.Key, idempotency.ErrUnresolved)
		case idempotency.TakeOver:
			lease, err := s.keys.TakeOver(ctx, s.pool, rec)
			if errors.Is(err, idempotency.ErrInProgress) {
				if rec, err = s.keys.Lookup(ctx, s.pool, rec.TenantID, rec.Key); err != nil {
					return Result{}, err
				}
				continue
			}
			if err != nil {
				return Result{}, err
			}
			s.tel.countOutcome(ctx, decision.String())
			resp, err := s.Resume(ctx, lease)
			return Result{Response: resp, Outcome: OutcomeTakeover}, err
		}
	}
	s.tel.countOutcome(ctx, idempotency.InProgress.String())
	return Result{}, idempotency.ErrInProgress
}

// Resume drives a key this worker has just taken over (a client's retry, or
// the reaper) from its recovery point to done. Its span links to the trace
// of the request that claimed the key.
func (s *Service) Resume(ctx context.Context, lease *idempotency.Lease) (_ idempotency.Response, err error) {
	opts := append(linkTo(lease.Record.TraceContext), trace.WithAttributes(
		attrTenant.Int64(lease.Record.TenantID),
		attrRecoveryPoint.String(string(lease.Record.Point)),
		attrLockVersion.Int64(lease.Record.LockVersion)))
	ctx, span := s.tel.tracer.Start(ctx, "charges.resume", opts...)
	defer func() { endSpan(span, err) }()
	span.AddEvent(EventTakeover)
	return s.drive(ctx, lease, lease.Record.Point, nil)
}

// drive advances a leased request from point to done, one transaction per
// case. charge is the request's charge if the caller has it in hand.
//
// If the lease is lost on the way (a worker that stalled past its lease and
// was taken over), drive answers only with what the key stores: the new
// holder's response once it is done, else ErrInProgress. It never answers
// from its own rolled-back work.
func (s *Service) drive(ctx context.Context, lease *idempotency.Lease, point idempotency.RecoveryPoint, charge *Charge) (idempotency.Response, error) {
	for {
		var (
			resp idempotency.Response
			err  error
		)
		switch point {
		case idempotency.PointStart:
			// start → charge_created (only here when not folded into the claim,
			// or when a crash came between a one-commit claim and this).
			var params CreateParams
			if params, err = ParseCreateParams(lease.Record.Request.Body); err != nil {
				return resp, fmt.Errorf("resume %q: stored request: %w", lease.Record.Key, err)
			}
			err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				charge, err = s.createCharge(ctx, tx, lease, newChargeID(), params, true)
				return err
			})
			point = PointChargeCreated
			if err == nil {
				err = s.crash(ctx, CrashAfterChargeCreated)
			}

		case PointChargeCreated:
			// The foreign call, then charge_created → psp_authorized and,
			// folded into the same transaction, → done. What happens is
			// decided by the answer's class alone (psp.Classify), the same
			// whether the api or the reaper drives the key:
			//   success, decline  → recorded: authorized or declined
			//   refused (final)   → recorded: failed, 402 payment_failed
			//   busy, unknown     → released, next attempt on the schedule
			// A charge created in this very run cannot have reached the PSP
			// yet; any other is looked up by reference before anything is
			// sent (the PSP may have acted on a request whose answer was
			// lost, and may have forgotten its key since).
			firstSend := charge != nil
			if charge == nil {
				if charge, err = chargeByKey(ctx, s.pool, lease.Record.ID()); err != nil {
					return resp, err
				}
			}
			var out psp.Outcome
			if out, err = s.authorize(ctx, lease, charge, firstSend); out.Class == psp.ClassBusy || out.Class == psp.ClassUnknown {
				return resp, s.release(ctx, lease, err, out.RetryAfter)
			}
			if err = s.crash(ctx, CrashAfterPSPCall); err != nil {
				return resp, err
			}
			err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				// Folded, psp_authorized is never committed on its own: it
				// needs no fence of its own either, since finish, in the same
				// transaction, is fenced and nothing commits unless it matches.
				if err := s.recordAuthorization(ctx, tx, lease, charge, out, s.cfg.OneCommitPerPhase); err != nil || s.cfg.OneCommitPerPhase {
					return err
				}
				resp, err = s.finish(ctx, tx, lease, charge)
				return err
			})
			point = PointPSPAuthorized
			if !s.cfg.OneCommitPerPhase {
				point = idempotency.PointDone
			}
			if err == nil {
				err = s.crash(ctx, CrashAfterPSPAuthorized)
			}

		case PointPSPAuthorized:
			// psp_authorized → done.
			err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
				if charge == nil {
					if charge, err = chargeByKey(ctx, tx, lease.Record.ID()); err != nil {
						return err
					}
				}
				resp, err = s.finish(ctx, tx, lease, charge)
				return err
			})
			point = idempotency.PointDone

		case idempotency.PointDone:
			return resp, nil

		default:
			return resp, fmt.Errorf("resume %q: unknown recovery point %q", lease.Record.Key, point)
		}

		switch {
		case errors.Is(err, idempotency.ErrLeaseLost):
			return s.afterLeaseLost(ctx, lease)
		case err != nil && dbstate.Unavailable(err):
			// The database went away mid-run (after the PSP answered,
			// say): the key stays at its last committed recovery point,
			// and is released once the database is back, so that the
			// client's retry resumes it then, not a lease later.
			s.releaseLater(lease, err)
			return resp, dbstate.Wrap(err)
		case err != nil:
			return resp, err
		case point == idempotency.PointDone:
			return resp, nil
		}
	}
}

// createCharge is the arrow start → charge_created: a pending charge row
// with the given id. advance records the point and the key's object, fenced;
// the claim's transaction passes false, its new key row having recorded
// both already.
func (s *Service) createCharge(ctx context.Context, tx pgx.Tx, lease *idempotency.Lease, id string, params CreateParams, advance bool) (c *Charge, err error) {
	err = s.arrow(ctx, lease, PointChargeCreated, func(ctx context.Context) error {
		if advance {
			if err := lease.Advance(ctx, tx, PointChargeCreated); err != nil {
				return err
			}
			if err := lease.SetObject(ctx, tx, id); err != nil {
				return err
			}
		}
		c, err = insertCharge(ctx, tx, lease.Record.ID(), id, params)
		return err
	})
	return c, err
}

// authorize makes the foreign call: one attempt, with the PSP client's own
// quick retries and lookups. Its PSP key is derived from the charge id,
// unique across tenants and stable across retries and takeovers, so the PSP
// answers a repeat with its first answer while it remembers the key; after
// that, the lookup by reference that precedes every resend (unless
// firstSend) is what keeps it from authorizing twice. A heartbeat keeps the
// lease while the call is slow, and is stopped before this returns, so that
// it can never renew a lease the caller then releases.
func (s *Service) authorize(ctx context.Context, lease *idempotency.Lease, c *Charge, firstSend bool) (psp.Outcome, error) {
	hbCtx, stop := context.WithCancel(ctx)
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		lease.Heartbeat(hbCtx, s.pool, func(error) {})
	}()
	defer func() { stop(); <-beat }()
	start := time.Now()
	out, err := s.psp.AuthorizeOutcome(ctx, psp.AuthorizeRequest{
		IdempotencyKey: PSPKey(c.ID),
		FirstSend:      firstSend || defectNoLookup,
		Amount:         c.Amount,
		Currency:       c.Currency,
		PaymentMethod:  c.PaymentMethod,
		Reference:      c.ID,
	})
	s.recordPSP(ctx, start, out)
	if err != nil {
		return out, fmt.Errorf("authorize %s: %w", c.ID, err)
	}
	return out, nil
}

// recordAuthorization is the arrow charge_created → psp_authorized: the
// PSP's final answer (an authorization, a decline or a refusal) on the
// charge row. advance records the point, fenced, for when this arrow
// commits on its own.
func (s *Service) recordAuthorization(ctx context.Context, tx pgx.Tx, lease *idempotency.Lease, c *Charge, out psp.Outcome, advance bool) error {
	return s.arrow(ctx, lease, PointPSPAuthorized, func(ctx context.Context) error {
		if advance {
			if err := lease.Advance(ctx, tx, PointPSPAuthorized); err != nil {
				return err
			}
		}
		switch {
		case out.Class == psp.ClassSuccess:
			c.Status, c.PSPReference = StatusAuthorized, &out.Authorization.ID
		case out.Declined():
			c.Status, c.PSPReference, c.DeclineCode = StatusDeclined, &out.Authorization.ID, out.Authorization.DeclineCode
		default: // refused: nothing was done at the PSP, and never will be
			reason := cmp.Or(out.Reason, "refused by the payment service provider")
			c.Status, c.FailureReason = StatusFailed, &reason
		}
		return recordAuthorization(ctx, tx, c)
	})
}

// finish is the arrow psp_authorized → done: the response, stored for replay
// in the transaction of the last effect.
func (s *Service) finish(ctx context.Context, tx pgx.Tx, lease *idempotency.Lease, c *Charge) (idempotency.Response, error) {
	resp := response(c)
	err := s.arrow(ctx, lease, idempotency.PointDone, func(ctx context.Context) error {
		return lease.Finish(ctx, tx, resp)
	})
	if err != nil {
		return idempotency.Response{}, err
	}
	return resp, nil
}

// response is the final answer for a charge the PSP has answered.
func response(c *Charge) idempotency.Response {
	switch c.Status {
	case StatusDeclined:
		p := problem.New(http.StatusPaymentRequired, problem.CardDeclined, "The card was declined.")
		p.Charge = c.ID
		return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
	case StatusFailed:
		reason := "refused by the payment service provider"
		if c.FailureReason != nil {
			reason = *c.FailureReason
		}
		p := problem.New(http.StatusPaymentRequired, problem.PaymentFailed, "The payment failed: "+reason)
		p.Charge = c.ID
		return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
	}
	body, err := c.MarshalJSON()
	if err != nil {
		panic(err) // plain fields only: cannot fail
	}
	return idempotency.Response{Status: http.StatusCreated, ContentType: "application/json", Body: append(body, '\n')}
}

// release ends an attempt whose PSP outcome is unknown (or busy) at
// charge_created: the lease is given up and the next attempt scheduled, no
// sooner than notBefore (a busy PSP's Retry-After), or the key is handed to
// an operator once it is past GIVE_UP_AFTER. It runs even if the request's
// context ended: a lease left held would make every retry wait out the
// lease.
func (s *Service) release(ctx context.Context, lease *idempotency.Lease, cause error, notBefore time.Duration) error {
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rel, err := lease.Release(relCtx, s.pool, cause, notBefore)
	if err != nil && !errors.Is(err, idempotency.ErrLeaseLost) {
		if dbstate.Unavailable(err) {
			s.releaseLater(lease, cause)
		}
		return errors.Join(cause, err)
	}
	if rel.NeedsAttention {
		return fmt.Errorf("%w: %w", idempotency.ErrUnresolved, cause)
	}
	if errors.Is(cause, psp.ErrUnavailable) || errors.Is(cause, psp.ErrBusy) {
		return &UnavailableError{ChargeID: lease.Record.ObjectID, RetryAfter: rel.RetryAfter, Cause: cause}
	}
	return cause
}

// releaseLater releases the lease of a run the database failed under, once
// the database answers again, retrying in the background with a growing
// pause. It gives up when the lease would have run out by itself anyway, or
// when the release finds the lease gone (the run's last commit did land,
// or someone took the key over). The key stays at its last committed
// recovery point: the PSP's answer, if one was lost with the database, is
// found again by the lookup by reference that precedes any resend under the
// same PSP key. Wait waits for these to end.
func (s *Service) releaseLater(lease *idempotency.Lease, cause error) {
	giveUp := time.Now().Add(s.keys.Lease())
	s.background.Go(func() {
		pause := 100 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := lease.Release(ctx, s.pool, cause, 0)
			cancel()
			switch {
			case err == nil:
				s.log.Info("released the lease of a run the database failed under", "key", lease.Record.Key)
				return
			case errors.Is(err, idempotency.ErrLeaseLost):
				return
			case !dbstate.Unavailable(err) || time.Now().Add(pause).After(giveUp):
				s.log.Warn("could not release the lease of a run the database failed under; it runs out by itself",
					"key", lease.Record.Key, "error", err.Error())
				return
			}
			time.Sleep(pause)
			pause = min(2*pause, 2*time.Second)
		}
	})
}

// Wait waits until the leases being released in the background
// (releaseLater) are released or given up; for shutdown and tests.
func (s *Service) Wait() { s.background.Wait() }

// afterLeaseLost answers a run whose lease was taken over: with the key's
// stored response if the new holder finished, else ErrInProgress.
func (s *Service) afterLeaseLost(ctx context.Context, lease *idempotency.Lease) (idempotency.Response, error) {
	rec, err := s.keys.Lookup(ctx, s.pool, lease.Record.TenantID, lease.Record.Key)
	if err != nil {
		return idempotency.Response{}, err
	}
	s.tel.countOutcome(ctx, "lease_lost")
	s.log.WarnContext(ctx, "lease lost to a takeover", "key", lease.Record.Key, "lock_version", lease.Record.LockVersion,
		"now_lock_version", rec.LockVersion)
	if rec.State == idempotency.StateDone && rec.CreatedAt.Equal(lease.Record.CreatedAt) {
		return *rec.Response, nil
	}
	return idempotency.Response{}, fmt.Errorf("key %q: %w", lease.Record.Key, idempotency.ErrInProgress)
}

func (s *Service) crash(ctx context.Context, at CrashPoint) error {
	if s.cfg.CrashHook == nil {
		return nil
	}
	return s.cfg.CrashHook(ctx, at)
}

// Get returns a tenant's charge, or ErrNotFound.
func (s *Service) Get(ctx context.Context, tenantID int64, id string) (*Charge, error) {
	return chargeByID(ctx, s.pool, tenantID, id)
}

// endSpan ends a request's span; a mismatch or a conflict is an answer the
// key gave (an event), not a failure of the span.
func endSpan(span trace.Span, err error) {
	if err != nil && !errors.Is(err, idempotency.ErrMismatch) && !errors.Is(err, idempotency.ErrInProgress) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func cmpLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
