// Package webhooks owns a tenant's webhook endpoints and sends them the
// events internal/events queued for them: at least once, signed, on the
// retry schedule, several deliverers at once (Deliverer, run by bin/reaper).
package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/phasepay/phasepay/internal/events"
)

// Sentinel errors.
var (
	// ErrNotFound: no such endpoint for this tenant (or it was deleted).
	ErrNotFound = errors.New("webhook endpoint not found")
	// ErrInvalid: the endpoint's URL or event list is not acceptable; the
	// error's text says why (400 invalid_request).
	ErrInvalid = errors.New("invalid webhook endpoint")
)

// Endpoint is a tenant's webhook endpoint. Secret is set only in the
// answer to its creation.
type Endpoint struct {
	TenantID  int64
	ID        string
	URL       string
	Events    []string
	Secret    string
	CreatedAt time.Time
}

// Limits of an endpoint, published in api/openapi.yaml.
const (
	MaxURLLength = 2048
	MaxEvents    = 16
)

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// ValidateEvents checks an endpoint's event list: known types, or "*"
// alone; duplicates removed.
func ValidateEvents(list []string) ([]string, error) {
	if len(list) == 0 || len(list) > MaxEvents {
		return nil, fmt.Errorf("%w: events: list 1 to %d event types, or [\"*\"]", ErrInvalid, MaxEvents)
	}
	var out []string
	for _, s := range list {
		t, err := events.ParseType(s, true)
		if err != nil {
			return nil, fmt.Errorf("%w: events: %v", ErrInvalid, err)
		}
		if !slices.Contains(out, string(t)) {
			out = append(out, string(t))
		}
	}
	if slices.Contains(out, "*") && len(out) > 1 {
		return nil, fmt.Errorf("%w: events: \"*\" stands alone", ErrInvalid)
	}
	return out, nil
}

const createSQL = `
INSERT INTO webhook_endpoints (tenant_id, id, url, events, secret)
VALUES ($1, $2, $3, $4, $5)
RETURNING created_at`

// Create stores a new endpoint and returns it with its secret. url and
// list must have been checked (CheckURL, ValidateEvents).
func Create(ctx context.Context, q events.DBTX, tenantID int64, url string, list []string) (Endpoint, error) {
	ep := Endpoint{TenantID: tenantID, ID: "we_" + randomHex(12), URL: url, Events: list,
		Secret: SecretPrefix + randomHex(24)}
	if err := q.QueryRow(ctx, createSQL, tenantID, ep.ID, url, list, ep.Secret).Scan(&ep.CreatedAt); err != nil {
		return Endpoint{}, fmt.Errorf("create webhook endpoint: %w", err)
	}
	return ep, nil
}

const endpointColumns = `tenant_id, id, url, events, created_at`

func scanEndpoint(row pgx.Row) (Endpoint, error) {
	var ep Endpoint
	err := row.Scan(&ep.TenantID, &ep.ID, &ep.URL, &ep.Events, &ep.CreatedAt)
	return ep, err
}

// Get returns one of the tenant's live endpoints, without its secret.
func Get(ctx context.Context, q events.DBTX, tenantID int64, id string) (Endpoint, error) {
	ep, err := scanEndpoint(q.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
 WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL`, tenantID, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, fmt.Errorf("webhook endpoint %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("webhook endpoint %q: %w", id, err)
	}
	return ep, nil
}

// listSQL pages through a tenant's live endpoints, newest first, keyset on
// (created_at, id) below the cursor ($2, $3), which the partial index
// webhook_endpoints_tenant_created serves as a range. The first page's
// cursor is 'infinity' with an empty id (as for charges, charges.List):
// an "$2 IS NULL OR …" instead cannot be a range in the one generic plan
// phasepay's connections reuse (dbpool.PlanCacheModeDefault), and would
// read every live endpoint above the cursor.
const listSQL = `SELECT ` + endpointColumns + ` FROM webhook_endpoints
 WHERE tenant_id = $1 AND deleted_at IS NULL
   AND (created_at, id) < ($2, $3)
 ORDER BY created_at DESC, id DESC
 LIMIT $4`

// top is the cursor of a first page: timestamptz 'infinity' sorts after
// every time a row holds.
var top = pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}

// List returns up to limit of the tenant's live endpoints, newest first,
// after startingAfter (none if ""), without secrets. It returns
// ErrNotFound if startingAfter names no live endpoint of the tenant.
func List(ctx context.Context, q events.DBTX, tenantID int64, startingAfter string, limit int) ([]Endpoint, error) {
	afterAt, afterID := top, ""
	if startingAfter != "" {
		ep, err := Get(ctx, q, tenantID, startingAfter)
		if err != nil {
			return nil, err
		}
		afterAt, afterID = pgtype.Timestamptz{Time: ep.CreatedAt, Valid: true}, ep.ID
	}
	rows, err := q.Query(ctx, listSQL, tenantID, afterAt, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	eps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Endpoint, error) { return scanEndpoint(row) })
	if err != nil {
		return nil, fmt.Errorf("list webhook endpoints: %w", err)
	}
	return eps, nil
}

// deleteSQL marks the endpoint deleted. It runs after
// events.LockEndpointsExclusiveSQL in the same transaction: that lock waits
// for every event transaction of the tenant in flight (they hold it
// shared from before they read the endpoints), so the events they queue
// for this endpoint were written before DELETE answered; and every event
// statement that starts after this transaction commits sees the endpoint
// deleted: no event written after DELETE answered is queued for it.
// Deliveries of earlier events go on.
const deleteSQL = `
UPDATE webhook_endpoints SET deleted_at = phasepay_now()
 WHERE tenant_id = $1 AND id = $2 AND deleted_at IS NULL
RETURNING ` + endpointColumns

// Delete deletes one of the tenant's endpoints and returns it, or
// ErrNotFound. It opens its own transaction on q.
func Delete(ctx context.Context, q events.Beginner, tenantID int64, id string) (Endpoint, error) {
	var ep Endpoint
	err := pgx.BeginFunc(ctx, q, func(tx pgx.Tx) error {
		var ignored string
		if err := tx.QueryRow(ctx, events.LockEndpointsExclusiveSQL, tenantID).Scan(&ignored); err != nil {
			return err
		}
		var err error
		ep, err = scanEndpoint(tx.QueryRow(ctx, deleteSQL, tenantID, id))
		return err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Endpoint{}, fmt.Errorf("delete webhook endpoint %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("delete webhook endpoint %q: %w", id, err)
	}
	return ep, nil
}
