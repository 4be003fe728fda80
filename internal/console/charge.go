package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// A charge's page: the charge, its authorization's attempts across PSPs,
// its refunds, the events about it and their deliveries, with links to
// the requests that made them.

type chargeData struct {
	Tenant   string
	Charge   *charges.Charge
	Key      string // the request that created it
	Attempts []chargeAttempt
	Refunds  []refundRow
	Events   []eventRef
}

type chargeAttempt struct {
	N           int
	PSP, PSPKey string
	Outcome     *string
	CreatedAt   time.Time
	EndedAt     *time.Time
}

// implicitAttempt is the one attempt of a charge without attempt rows: a
// single-PSP charge's first attempt is not recorded (package charges,
// insertCharge), and its outcome is the charge's status.
func implicitAttempt(c *charges.Charge) chargeAttempt {
	a := chargeAttempt{N: 1, PSP: c.PSP, PSPKey: charges.PSPKey(c.ID), CreatedAt: c.CreatedAt}
	var outcome string
	switch c.Status {
	case charges.StatusPending:
		return a
	case charges.StatusDeclined, charges.StatusFailed:
		outcome = string(c.Status)
	default: // authorized, and captured or voided since
		outcome = string(charges.StatusAuthorized)
	}
	a.Outcome = &outcome
	return a
}

type refundRow struct {
	ID, Key, Status string
	Amount          int64
	PSPReference    *string
	FailureReason   *string
	CreatedAt       time.Time
}

// chargeKeySQL is the key that created a charge: the API's charge object
// does not carry it, the console links its request.
const chargeKeySQL = `SELECT idempotency_key FROM charges WHERE tenant_id = $1 AND id = $2`

// chargeAttemptsSQL lists a charge's authorization attempts, one per PSP
// it was sent to, in order (charge_attempts' primary key). Package charges
// reads them only for the authorization itself, without their times.
const chargeAttemptsSQL = `
SELECT n, psp, psp_key, outcome, created_at, ended_at FROM charge_attempts
 WHERE tenant_id = $1 AND charge_id = $2 ORDER BY n`

// chargeRefundsSQL lists a charge's refunds with the keys that created
// them (refunds_charge_created), oldest first.
const chargeRefundsSQL = `
SELECT id, idempotency_key, status, amount, psp_reference, failure_reason, created_at FROM refunds
 WHERE tenant_id = $1 AND charge_id = $2 ORDER BY created_at, id LIMIT 200`

func (s *Server) charge(r *http.Request) (view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	tenantName, id := q.Get("tenant"), q.Get("id")
	if !validText(tenantName) || !validText(id) {
		return view{}, errNotFound
	}
	t, err := tenants.ByName(ctx, s.cfg.Pool, tenantName)
	if errors.Is(err, tenants.ErrTenantNotFound) {
		return view{}, errNotFound
	} else if err != nil {
		return view{}, err
	}
	c, err := charges.ByID(ctx, s.cfg.Pool, t.ID, id)
	if errors.Is(err, charges.ErrNotFound) {
		return view{}, errNotFound
	} else if err != nil {
		return view{}, err
	}
	d := chargeData{Tenant: t.Name, Charge: c}
	if err := s.cfg.Pool.QueryRow(ctx, chargeKeySQL, t.ID, id).Scan(&d.Key); err != nil {
		return view{}, fmt.Errorf("key of %s: %w", id, err)
	}
	rows, err := s.cfg.Pool.Query(ctx, chargeAttemptsSQL, t.ID, id)
	if err != nil {
		return view{}, fmt.Errorf("attempts of %s: %w", id, err)
	}
	if d.Attempts, err = pgx.CollectRows(rows, pgx.RowToStructByPos[chargeAttempt]); err != nil {
		return view{}, fmt.Errorf("attempts of %s: %w", id, err)
	}
	if len(d.Attempts) == 0 {
		d.Attempts = []chargeAttempt{implicitAttempt(c)}
	}
	rows, err = s.cfg.Pool.Query(ctx, chargeRefundsSQL, t.ID, id)
	if err != nil {
		return view{}, fmt.Errorf("refunds of %s: %w", id, err)
	}
	if d.Refunds, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (refundRow, error) {
		var rr refundRow
		return rr, row.Scan(&rr.ID, &rr.Key, &rr.Status, &rr.Amount, &rr.PSPReference, &rr.FailureReason, &rr.CreatedAt)
	}); err != nil {
		return view{}, fmt.Errorf("refunds of %s: %w", id, err)
	}
	if d.Events, err = s.chargeEvents(ctx, t.ID, c, d.Refunds); err != nil {
		return view{}, err
	}
	return view{template: "charge", page: page{Title: "Charge " + c.ID, Nav: "requests", Live: true, Data: d}}, nil
}

// chargeEvents are the events about the charge and its refunds, from its
// creation on.
func (s *Server) chargeEvents(ctx context.Context, tenantID int64, c *charges.Charge, refunds []refundRow) ([]eventRef, error) {
	now := time.Now().Add(time.Minute)
	evs, err := s.eventsOf(ctx, tenantID, c.ID, c.CreatedAt, now)
	if err != nil {
		return nil, err
	}
	for _, rf := range refunds {
		more, err := s.eventsOf(ctx, tenantID, rf.ID, rf.CreatedAt, now)
		if err != nil {
			return nil, err
		}
		evs = append(evs, more...)
	}
	return evs, nil
}

// objectEventsSQL finds the events about an object ($4), written between
// $2 and $3, through events_tenant_created. Events carry their object only
// in their body, so the window (from the object's creation) bounds the
// read; a charge's requests' own events are found by their instants
// instead (package timeline), but a charge's captures and voids are
// requests the console cannot find by charge (idempotency_keys has no
// index on object_id, and an operator page is no reason for one).
const objectEventsSQL = `
SELECT id, type, created_at FROM events
 WHERE tenant_id = $1 AND created_at >= $2 AND created_at <= $3
   AND convert_from(body, 'UTF8')::jsonb #>> '{data,object,id}' = $4
 ORDER BY created_at, id
 LIMIT 100`

// eventRef is an event and its deliveries, as the charge page shows them.
type eventRef struct {
	ID         string
	Type       string
	CreatedAt  time.Time
	Deliveries []webhooks.Delivery
}

func (s *Server) eventsOf(ctx context.Context, tenantID int64, objectID string, from, to time.Time) ([]eventRef, error) {
	rows, err := s.cfg.Pool.Query(ctx, objectEventsSQL, tenantID, from, to, objectID)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", objectID, err)
	}
	evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (eventRef, error) {
		var e eventRef
		return e, row.Scan(&e.ID, &e.Type, &e.CreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", objectID, err)
	}
	for i := range evs {
		if evs[i].Deliveries, err = webhooks.Deliveries(ctx, s.cfg.Pool, tenantID, evs[i].ID); err != nil {
			return nil, err
		}
	}
	return evs, nil
}
