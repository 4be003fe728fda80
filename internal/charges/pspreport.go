package charges

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
)

// What a PSP's own webhook (Stripe's, POST /v1/psp_webhooks/{psp}) does to a
// charge: it settles nothing by itself. It writes a hint, the PSP's id of
// the object it reported, on the charge's open attempt at that PSP, and
// makes the charge's unfinished authorization due now. The run that
// resumes it (the reaper, within one REAPER_INTERVAL, or the client's
// retry) passes the hint to the PSP's connector, which reads the object by
// id and checks it is the charge's, and records what it finds through the
// engine's phases, fenced, like any recovery point. So a webhook cannot
// record anything twice, nor anything a run did not see for itself; one
// that arrives twice, late or for an already settled charge changes
// nothing.

// hintSQL writes the hint on the open attempt at the PSP. Unfenced: a hint
// decides nothing, and a run that loaded the attempts before it simply
// does not see it (the next one will).
//
// A charge without attempts has its first one unrecorded (insertCharge):
// the hint records it, open, at the charge's PSP under PSPKey ($5), as
// loadAttempts reads it. A run that loaded the charge before it finishes
// without ending that row (its outcome is the charge's status); one that
// renews the key or moves on ends it (recordFirstSQL).
const hintSQL = `
WITH hinted AS (
    UPDATE charge_attempts SET psp_reference = $4
     WHERE tenant_id = $1 AND charge_id = $2 AND psp = $3 AND outcome IS NULL
       AND psp_reference IS DISTINCT FROM $4
)
INSERT INTO charge_attempts (tenant_id, charge_id, n, psp, psp_key, psp_reference, created_at)
SELECT tenant_id, id, 1, psp, $5, $4, created_at FROM charges
 WHERE tenant_id = $1 AND id = $2 AND psp = $3
   AND NOT EXISTS (SELECT FROM charge_attempts WHERE tenant_id = $1 AND charge_id = $2)
ON CONFLICT DO NOTHING`

// chargeKeySQL reads what PSPReport needs of the charge: its status and
// the key that created it.
const chargeKeySQL = `SELECT status, idempotency_key FROM charges WHERE tenant_id = $1 AND id = $2`

// PSPReport records that the PSP psp reported object (a PaymentIntent,
// pi_…) for the tenant's charge, and reports whether the charge's
// authorization was unfinished and is now due. An unknown charge is
// ErrNotFound.
func (s *Service) PSPReport(ctx context.Context, tenantID int64, chargeID, pspName, object string) (bool, error) {
	var (
		status Status
		key    string
	)
	err := s.pool.QueryRow(ctx, chargeKeySQL, tenantID, chargeID).Scan(&status, &key)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("psp report for %s: %w", chargeID, ErrNotFound)
	}
	if err != nil {
		return false, fmt.Errorf("psp report for %s: %w", chargeID, err)
	}
	if status != StatusPending {
		return false, nil // settled already: the report tells nothing new
	}
	if _, err := s.pool.Exec(ctx, hintSQL, tenantID, chargeID, pspName, object, PSPKey(chargeID)); err != nil {
		return false, fmt.Errorf("psp report for %s: hint: %w", chargeID, err)
	}
	// Due now, also from needs_attention: the report may be what settles it.
	err = s.keys.DueNow(ctx, s.pool, tenantID, key)
	switch {
	case errors.Is(err, idempotency.ErrFinished), errors.Is(err, idempotency.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("psp report for %s: %w", chargeID, err)
	}
	return true, nil
}
