package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
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
	// ErrLimitReached: the tenant has MaxEndpoints live endpoints already
	// (400 endpoint_limit_reached).
	ErrLimitReached = errors.New("webhook endpoint limit reached")
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

// Limits of an endpoint, published in api/openapi.yaml, and how many live
// endpoints a tenant may have (as Stripe allows): enough for any receiver
// layout, and a bound on what one tenant can make phasepay send (16
// endpoints, even all on one third party's URL, are at most 16 signed
// POSTs per event).
const (
	MaxURLLength = 2048
	MaxEvents    = 16
	MaxEndpoints = 16
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

// createSQL stores an endpoint in the lowest of the tenant's MaxEndpoints
// slots that no live endpoint holds. The limit is the database's, not a
// count made before an insert: the unique index webhook_endpoints_slot
// (tenant_id, slot) WHERE deleted_at IS NULL, and the CHECK that slot is
// 1 to 16 (migrations/00018), let no two live endpoints of a tenant share
// a slot, however many creations run at once. Two creations that both saw
// slot n free: the second one's insert waits for the first's transaction
// and then does nothing (ON CONFLICT), and Create tries again in a new
// snapshot (READ COMMITTED), which sees slot n taken. free is false when
// every slot is taken: the limit is reached. DELETE frees the slot
// (deleted_at set).
var createSQL = `
WITH free AS (
    SELECT s.slot FROM generate_series(1, ` + strconv.Itoa(MaxEndpoints) + `) AS s (slot)
     WHERE NOT EXISTS (SELECT FROM webhook_endpoints w
                        WHERE w.tenant_id = $1 AND w.slot = s.slot AND w.deleted_at IS NULL)
     ORDER BY s.slot
     LIMIT 1
), ins AS (
    INSERT INTO webhook_endpoints (tenant_id, id, url, events, secret, slot)
    SELECT $1, $2, $3, $4, $5, free.slot FROM free
        ON CONFLICT (tenant_id, slot) WHERE deleted_at IS NULL DO NOTHING
    RETURNING created_at
)
SELECT EXISTS (SELECT FROM free), (SELECT created_at FROM ins)`

// Create stores a new endpoint and returns it with its secret, or
// ErrLimitReached if the tenant has MaxEndpoints live endpoints. rawURL
// and list must have been checked (ParseURL, Guard.CheckHost,
// ValidateEvents). q is best the transaction of the request's
// idempotency key, in READ COMMITTED.
func Create(ctx context.Context, q events.DBTX, tenantID int64, rawURL string, list []string) (Endpoint, error) {
	ep := Endpoint{TenantID: tenantID, ID: "we_" + randomHex(12), URL: rawURL, Events: list,
		Secret: SecretPrefix + randomHex(24)}
	// Each lost race is a slot another creation took: at most MaxEndpoints.
	for range MaxEndpoints + 1 {
		var (
			free    bool
			created pgtype.Timestamptz
		)
		if err := q.QueryRow(ctx, createSQL, tenantID, ep.ID, rawURL, list, ep.Secret).Scan(&free, &created); err != nil {
			return Endpoint{}, fmt.Errorf("create webhook endpoint: %w", err)
		}
		if !free {
			return Endpoint{}, fmt.Errorf("create webhook endpoint: %w (%d)", ErrLimitReached, MaxEndpoints)
		}
		if created.Valid {
			ep.CreatedAt = created.Time
			return ep, nil
		}
	}
	return Endpoint{}, fmt.Errorf("create webhook endpoint: no slot after %d tries", MaxEndpoints+1)
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
