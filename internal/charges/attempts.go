package charges

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
)

// A charge's authorization attempts, one per PSP it is sent to (the rule
// they keep is in failover.go), and their rows.

// attempt is one authorization attempt of a charge (charge_attempts).
type attempt struct {
	N   int
	PSP string
	Key string
	// Outcome is authorized, declined or refused once answered, replaced
	// once its key was spent (renewKey).
	Outcome *string
	// CreatedAt is when the attempt was recorded, before its first send:
	// its key is no older at the PSP (the process's clock for an attempt
	// this run recorded, the database's for one read back).
	CreatedAt time.Time
	// Hint is a PSP object reported for the charge by the PSP's own
	// webhook (psp.AuthorizeRequest.Hint), null if none.
	Hint *string
	// Unrecorded is the first attempt of a single-PSP charge, which has
	// no row (see insertCharge): its outcome is written on the charge
	// only, and its row is made when it ends otherwise (recordFirstSQL).
	Unrecorded bool
}

// The outcomes an attempt records.
const (
	attemptAuthorized = "authorized"
	attemptDeclined   = "declined"
	attemptRefused    = "refused"
	attemptReplaced   = "replaced"
)

// attemptKey is the PSP key of attempt n: PSPKey (<charge>:authorize) for
// the first in single-PSP mode, <charge>:authorize:<n> with several PSPs
// and for every renewed key, so that each attempt sends a key of its own
// and a resend reuses it.
func attemptKey(chargeID string, n int, single bool) string {
	if single && n == 1 {
		return PSPKey(chargeID)
	}
	return fmt.Sprintf("%s:authorize:%d", chargeID, n)
}

// insertAttemptSQL records an attempt before its call, in the fenced
// transaction of the phase before it. The partial unique index
// charge_attempts_open_per_psp (migrations/00032) is the database's word
// that a charge is never sent to one PSP under two open attempts.
const insertAttemptSQL = `INSERT INTO charge_attempts (tenant_id, charge_id, n, psp, psp_key) VALUES ($1, $2, $3, $4, $5)`

func insertAttempt(tx *phases.Tx, c *Charge, a attempt) {
	tx.Queue(insertAttemptSQL, c.TenantID, c.ID, a.N, a.PSP, a.Key)
	a.CreatedAt = time.Now()
	c.attempts = append(c.attempts, a)
}

// endAttemptSQL writes an attempt's answer, with the charge's update.
const endAttemptSQL = `UPDATE charge_attempts SET outcome = $4, ended_at = phasepay_now()
 WHERE tenant_id = $1 AND charge_id = $2 AND n = $3`

// recordFirstSQL writes the unrecorded first attempt ($3 its PSP, $4 its
// key) as ended with outcome $5, created when its charge was: a key
// renewed, or a refusal moving the charge on, needs the list of attempts
// that a single unrecorded one stood for. A PSP webhook's hint may have
// recorded it since (hintSQL): then it is ended.
const recordFirstSQL = `
INSERT INTO charge_attempts (tenant_id, charge_id, n, psp, psp_key, outcome, created_at, ended_at)
SELECT tenant_id, id, 1, $3, $4, $5, created_at, phasepay_now() FROM charges WHERE tenant_id = $1 AND id = $2
ON CONFLICT (tenant_id, charge_id, n) DO UPDATE SET outcome = excluded.outcome, ended_at = excluded.ended_at`

func endAttempt(tx *phases.Tx, c *Charge, a *attempt, outcome string) {
	if a.Unrecorded {
		tx.Queue(recordFirstSQL, c.TenantID, c.ID, a.PSP, a.Key, outcome)
		a.Unrecorded = false
	} else {
		tx.Queue(endAttemptSQL, c.TenantID, c.ID, a.N, outcome)
	}
	a.Outcome = &outcome
}

// attemptsSQL lists a charge's attempts in order (its primary key).
const attemptsSQL = `SELECT n, psp, psp_key, outcome, created_at, psp_reference FROM charge_attempts
 WHERE tenant_id = $1 AND charge_id = $2 ORDER BY n`

// loadAttempts reads c's attempts. A charge without any has had one
// attempt, at its PSP under PSPKey, created with it: a single-PSP charge
// whose first attempt was not recorded (insertCharge), or one created
// before attempts were.
func loadAttempts(ctx context.Context, q idempotency.DBTX, c *Charge) error {
	rows, err := q.Query(ctx, attemptsSQL, c.TenantID, c.ID)
	if err != nil {
		return fmt.Errorf("attempts of %s: %w", c.ID, err)
	}
	c.attempts, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (attempt, error) {
		var a attempt
		return a, row.Scan(&a.N, &a.PSP, &a.Key, &a.Outcome, &a.CreatedAt, &a.Hint)
	})
	if err != nil {
		return fmt.Errorf("attempts of %s: %w", c.ID, err)
	}
	if len(c.attempts) == 0 {
		// Its key is as old as the charge.
		c.attempts = []attempt{{N: 1, PSP: c.PSP, Key: PSPKey(c.ID), CreatedAt: c.CreatedAt, Unrecorded: true}}
	}
	return nil
}

// tried names every PSP c was sent to (or is about to be).
func (c *Charge) tried() []string {
	out := make([]string, len(c.attempts))
	for i, a := range c.attempts {
		out[i] = a.PSP
	}
	return out
}

// current is the attempt under way: the last.
func (c *Charge) current() *attempt { return &c.attempts[len(c.attempts)-1] }

// renewed reports whether an attempt before the current one, at the same
// PSP, had its key spent: the current key was made to replace it.
func (c *Charge) renewed() bool {
	cur := c.current()
	for _, a := range c.attempts[:len(c.attempts)-1] {
		if a.PSP == cur.PSP && a.Outcome != nil && *a.Outcome == attemptReplaced {
			return true
		}
	}
	return false
}
