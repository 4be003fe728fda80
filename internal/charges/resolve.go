package charges

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/psp"
)

// An operator settles a request that needs attention (`api requests
// resolve`) after checking the PSP by hand. The resolution is written like
// any last phase: the object's end, the stored answer and an audit record in
// one transaction, fenced by a lease taken for the resolution. Before that,
// the PSP is asked what it holds for the request's object, and an answer
// that contradicts the operator stops the resolution: an authorization
// marked failed would leave the customer's funds held with nobody to release
// them; a charge marked succeeded that the PSP never authorized could never
// be captured. This file settles charges; resolve_settlement.go captures,
// voids and refunds.

// ResolveAs is how an operator settles a request.
type ResolveAs string

// The two ways to settle a request.
const (
	ResolveFailed    ResolveAs = "failed"
	ResolveSucceeded ResolveAs = "succeeded"
)

// Resolution is an operator's settlement of a needs_attention request.
type Resolution struct {
	As     ResolveAs
	Reason string
	By     string
	// Force skips the lookup at the PSP, for when the PSP is unreachable
	// and the operator checked its books some other way.
	Force bool
}

// ErrResolutionContradicted: the PSP's books say otherwise than the
// operator; nothing was changed.
var ErrResolutionContradicted = errors.New("the PSP contradicts the resolution")

// ErrPSPLookupFailed: the PSP could not be asked; retry, or use Force.
var ErrPSPLookupFailed = errors.New("the PSP could not be asked (use --force to resolve without it)")

const insertResolutionSQL = `
INSERT INTO request_resolutions (tenant_id, key, key_created_at, resolved_as, reason, resolved_by, forced, psp_said)
VALUES ($1, $2, $3, $4, $5, $6, $7, nullif($8, ''))`

// resolveChargeSQL settles the charge, and, when the PSP was found to hold
// an authorization, names that PSP on the charge ($6) and ends its attempt
// as authorized: with several PSPs, the charge must show the one that
// holds the customer's funds, which the capture and the refund go to.
const resolveChargeSQL = `
WITH attempt AS (
    UPDATE charge_attempts SET outcome = 'authorized', ended_at = phasepay_now()
     WHERE tenant_id = $1 AND charge_id = $2 AND psp = $6 AND $4::text IS NOT NULL
)
UPDATE charges
   SET status = $3, psp_reference = coalesce($4, psp_reference), failure_reason = $5,
       psp = coalesce(nullif($6, ''), psp), updated_at = phasepay_now()
 WHERE tenant_id = $1 AND id = $2`

// Resolve settles the needs_attention request of (tenantID, key) as r says
// and returns the answer now stored for it. Errors: idempotency.ErrNotFound,
// idempotency.ErrNotNeedsAttention, ErrResolutionContradicted,
// ErrPSPLookupFailed; the key is left as it was on any error.
func (s *Service) Resolve(ctx context.Context, tenantID int64, key string, r Resolution) (idempotency.Response, error) {
	if r.As != ResolveFailed && r.As != ResolveSucceeded {
		return idempotency.Response{}, fmt.Errorf("resolve %q: --as must be failed or succeeded, got %q", key, r.As)
	}
	if r.Reason == "" || r.By == "" {
		return idempotency.Response{}, fmt.Errorf("resolve %q: a reason and an operator name are required", key)
	}
	lease, err := s.keys.TakeForResolution(ctx, s.pool, tenantID, key)
	if err != nil {
		return idempotency.Response{}, err
	}
	resp, err := s.resolve(ctx, lease, r)
	if err != nil {
		// Taking the key bumped its lock_version: the refusal is written
		// in its timeline with it, naming who tried, as what, and why not
		// (for operators; a tenant reads only that an operator acted).
		lease.Note(idempotency.Entry{Kind: idempotency.KindResolutionRefused, By: idempotency.RoleOperator,
			Operator: r.By, As: string(r.As), Detail: err.Error()})
		giveBackCtx := context.WithoutCancel(ctx)
		return idempotency.Response{}, errors.Join(err, lease.ReturnToAttention(giveBackCtx, s.pool))
	}
	return resp, nil
}

// resolve settles the request the lease holds by the operation that runs
// it: each looks up, and settles, its own object. A capture's key created
// no charge; read as one, its resolution would find none and settle the
// request without asking the PSP (pitfall O4 "A capture, void or refund
// resolved as if it were a new charge").
func (s *Service) resolve(ctx context.Context, lease *idempotency.Lease, r Resolution) (idempotency.Response, error) {
	switch op := lease.Record.Operation; {
	case op == s.authorize.Name:
		return s.resolveCharge(ctx, lease, r)
	case s.capture != nil && op == s.capture.Name:
		return s.resolveSettlement(ctx, lease, r, psp.KindCapture)
	case s.void != nil && op == s.void.Name:
		return s.resolveSettlement(ctx, lease, r, psp.KindVoid)
	case s.refund != nil && op == s.refund.Name:
		return s.resolveRefund(ctx, lease, r)
	}
	return idempotency.Response{}, fmt.Errorf("resolve %q: no resolution for operation %q", lease.Record.Key, lease.Record.Operation)
}

// resolveCharge settles an authorization (charges.create): the charge's
// end, looked up at every PSP the charge was sent to.
func (s *Service) resolveCharge(ctx context.Context, lease *idempotency.Lease, r Resolution) (idempotency.Response, error) {
	charge, err := chargeByKey(ctx, s.pool, lease.Record.ID())
	if errors.Is(err, ErrNotFound) {
		// Stopped before its charge existed: nothing can have reached the
		// PSP, so only failed is true.
		if r.As == ResolveSucceeded {
			return idempotency.Response{}, fmt.Errorf("%w: the request never created a charge, so nothing was sent to the PSP", ErrResolutionContradicted)
		}
		charge = nil
	} else if err != nil {
		return idempotency.Response{}, err
	}

	var (
		auth    *psp.Authorization
		holder  string // the PSP that holds auth
		pspSaid string
	)
	if charge != nil && !r.Force {
		found, err := s.lookUpEverywhere(ctx, charge)
		if err != nil {
			return idempotency.Response{}, fmt.Errorf("%w: %w", ErrPSPLookupFailed, err)
		}
		auth, holder, pspSaid = pspVerdict(found)
		switch {
		case r.As == ResolveSucceeded && (auth == nil || auth.Status != psp.StatusAuthorized):
			return idempotency.Response{}, fmt.Errorf("%w: asked to mark %s succeeded, but the PSP says: %s", ErrResolutionContradicted, charge.ID, pspSaid)
		case r.As == ResolveFailed && auth != nil && auth.Status == psp.StatusAuthorized:
			return idempotency.Response{}, fmt.Errorf("%w: asked to mark %s failed, but the PSP holds authorization %s for it", ErrResolutionContradicted, charge.ID, auth.ID)
		}
	}

	return s.settle(ctx, lease, r, pspSaid, func(tx pgx.Tx) (idempotency.Response, error) {
		if charge != nil {
			var ref *string
			if auth != nil {
				ref = &auth.ID
			}
			// The charge's failure_reason is in stable words too: the
			// operator's reason is kept in request_resolutions alone.
			status, reason := StatusAuthorized, (*string)(nil)
			if r.As == ResolveFailed {
				status, reason = StatusFailed, new(string(ResolvedFailedReason))
			}
			if auth == nil || auth.Status != psp.StatusAuthorized {
				holder = ""
			}
			if _, err := tx.Exec(ctx, resolveChargeSQL, charge.TenantID, charge.ID, status, ref, reason, holder); err != nil {
				return idempotency.Response{}, fmt.Errorf("resolve charge %s: %w", charge.ID, err)
			}
			charge.Status, charge.FailureReason = status, reason
			if ref != nil {
				charge.PSPReference = ref
			}
			if holder != "" {
				charge.PSP = holder
			}
			// The operator's settlement is a status change like any:
			// its event commits with it.
			if err := writeStatusEvent(ctx, tx, charge); err != nil {
				return idempotency.Response{}, err
			}
		}
		return resolvedResponse(charge, r), nil
	})
}

// settle commits a resolution: write's changes to the request's object and
// the answer it returns, the audit record and the timeline's entry, and
// the answer stored, in one transaction fenced by the lease (Finish).
func (s *Service) settle(ctx context.Context, lease *idempotency.Lease, r Resolution, pspSaid string,
	write func(pgx.Tx) (idempotency.Response, error)) (idempotency.Response, error) {
	var resp idempotency.Response
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if resp, err = write(tx); err != nil {
			return err
		}
		rec := lease.Record
		if _, err := tx.Exec(ctx, insertResolutionSQL, rec.TenantID, rec.Key, rec.CreatedAt, string(r.As), r.Reason, r.By,
			r.Force, pspSaid); err != nil {
			return fmt.Errorf("record resolution: %w", err)
		}
		// Noted last: Finish writes it, and a failure before would leave
		// it to the refusal's entries.
		lease.Note(idempotency.Entry{Kind: idempotency.KindResolved, By: idempotency.RoleOperator,
			Operator: r.By, As: string(r.As), Detail: r.Reason})
		return lease.Finish(ctx, tx, resp)
	})
	if err != nil {
		return idempotency.Response{}, fmt.Errorf("resolve %q: %w", lease.Record.Key, err)
	}
	return resp, nil
}

// heldAuthorization is an authorization found at a PSP, and which PSP.
type heldAuthorization struct {
	psp.Authorization
	PSP string
}

// lookUpEverywhere asks every PSP the charge was sent to (its attempts, in
// order) what it holds for the charge. Any failure fails it: a PSP that
// could not be asked may hold one.
func (s *Service) lookUpEverywhere(ctx context.Context, c *Charge) ([]heldAuthorization, error) {
	if err := loadAttempts(ctx, s.pool, c); err != nil {
		return nil, err
	}
	var found []heldAuthorization
	seen := map[string]bool{}
	for _, name := range append(c.tried(), c.PSP) {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		list, err := s.routes.LookupAt(ctx, name, c.ID)
		if err != nil {
			return nil, fmt.Errorf("psp %s: %w", name, err)
		}
		for _, a := range list {
			found = append(found, heldAuthorization{Authorization: a, PSP: name})
		}
	}
	return found, nil
}

// pspVerdict reads a lookup: the authorization that decides (an
// authorized one first: it holds the customer's funds), the PSP that holds
// it, and a one-line account of what the PSPs said, for the audit record.
func pspVerdict(found []heldAuthorization) (*psp.Authorization, string, string) {
	if len(found) == 0 {
		return nil, "", "no authorization for this charge"
	}
	best := found[0]
	for _, a := range found {
		if a.Status == psp.StatusAuthorized {
			best = a
			break
		}
	}
	return &best.Authorization, best.PSP, fmt.Sprintf("%s %s at %s (%d found)", best.Status, best.ID, best.PSP, len(found))
}

// ResolvedFailedReason is what a tenant reads of a request an operator
// resolved as failed, in its stored answer's detail: stable words, never
// the operator's reason, which may name a ticket, a person or the PSP's
// books (pitfall O5 "An operator's reason in a tenant's stored answer").
const ResolvedFailedReason = "settled as failed by an operator"

// resolvedResponse is the answer stored for a resolved request: what the
// request would have answered had the PSP's outcome been known. A failure
// says so in ResolvedFailedReason's words, replayed for ever: the
// operator's reason stays in request_resolutions (requests show, the
// console, the logs).
func resolvedResponse(c *Charge, r Resolution) idempotency.Response {
	if r.As == ResolveSucceeded {
		return response(c)
	}
	if c == nil {
		return resolvedFailure("")
	}
	return resolvedFailure(c.ID)
}

// resolvedFailure is the answer stored for a request resolved as failed:
// 402 payment_failed in ResolvedFailedReason's words, naming the charge
// (none when chargeID is empty).
func resolvedFailure(chargeID string) idempotency.Response {
	p := problem.New(http.StatusPaymentRequired, problem.PaymentFailed, "The payment failed: "+ResolvedFailedReason+".")
	p.Charge = chargeID
	return idempotency.Response{Status: p.Status, ContentType: problem.ContentType, Body: p.Body()}
}

// Resolved is an operator's resolution as recorded.
type Resolved struct {
	As         ResolveAs `json:"as"`
	Reason     string    `json:"reason"`
	By         string    `json:"by"`
	Forced     bool      `json:"forced"`
	PSPSaid    *string   `json:"psp_said"`
	ResolvedAt time.Time `json:"resolved_at"`
}

const resolutionsSQL = `
SELECT resolved_as, reason, resolved_by, forced, psp_said, resolved_at
  FROM request_resolutions WHERE tenant_id = $1 AND key = $2 AND key_created_at = $3 ORDER BY id`

// ResolutionsOf returns the resolutions recorded for a key incarnation.
func ResolutionsOf(ctx context.Context, q idempotency.DBTX, key idempotency.ID) ([]Resolved, error) {
	rows, err := q.Query(ctx, resolutionsSQL, key.TenantID, key.Key, key.CreatedAt)
	if err != nil {
		return nil, fmt.Errorf("resolutions of %q: %w", key.Key, err)
	}
	res, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Resolved])
	if err != nil {
		return nil, fmt.Errorf("resolutions of %q: %w", key.Key, err)
	}
	return res, nil
}

// ByID returns a tenant's charge, or ErrNotFound.
func ByID(ctx context.Context, q idempotency.DBTX, tenantID int64, id string) (*Charge, error) {
	return chargeByID(ctx, q, tenantID, id)
}
