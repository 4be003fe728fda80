package idempotency

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Browse is the operator console's list of requests (internal/console):
// across tenants, newest first, a page at a time, in the tenant view's
// states (View) like every other list of keys.

// BrowseFilter selects and pages requests for Browse.
type BrowseFilter struct {
	// TenantID, if not zero, keeps one tenant's requests.
	TenantID int64
	// State, if set, keeps one view state.
	State RequestState
	// Operation, if set, keeps one operation's requests (its name, as
	// the claim stored it: "charges.capture").
	Operation string
	// OlderThan, if positive, keeps requests claimed longer ago than this.
	OlderThan time.Duration
	// Due, with State unfinished, splits those requests as the census
	// does: DueNow keeps the ones whose next attempt has come, DueLater
	// the ones still waiting for it.
	Due Due
	// After, if set, is the last request of the previous page.
	After *Cursor
	// Limit is the page's size (default 50).
	Limit int
}

// Due is a filter by when an unfinished request is due (BrowseFilter.Due).
type Due string

// The filters by due time; the empty Due keeps both.
const (
	DueNow   Due = "now"
	DueLater Due = "later"
)

// Cursor names a request's place in Browse's order.
type Cursor struct {
	CreatedAt time.Time
	TenantID  int64
	Key       string
}

// CursorOf is v's place in Browse's order (and List's).
func CursorOf(v View) Cursor { return Cursor{CreatedAt: v.CreatedAt, TenantID: v.TenantID, Key: v.Key} }

// String spells the cursor as one word for a command line:
// <created_at, RFC 3339 to the nanosecond>/<tenant id>/<key>. The key
// comes last, so that a key holding "/" still parses (ParseCursor).
func (c Cursor) String() string {
	return c.CreatedAt.UTC().Format(time.RFC3339Nano) + "/" + strconv.FormatInt(c.TenantID, 10) + "/" + c.Key
}

// ParseCursor reads a cursor spelled by Cursor.String.
func ParseCursor(s string) (Cursor, error) {
	at, rest, ok1 := strings.Cut(s, "/")
	tenant, key, ok2 := strings.Cut(rest, "/")
	t, err1 := time.Parse(time.RFC3339Nano, at)
	id, err2 := strconv.ParseInt(tenant, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || key == "" {
		return Cursor{}, fmt.Errorf("cursor %q: not one a list printed (TIME/TENANT ID/KEY)", s)
	}
	return Cursor{CreatedAt: t, TenantID: id, Key: key}, nil
}

// browseSQL reads, for each tenant, its newest requests through
// idempotency_keys_tenant_created (tenant_id, created_at DESC, key DESC),
// and keeps the newest of those overall. An ORDER BY created_at across
// tenants has no index to walk (every index of idempotency_keys leads with
// tenant_id, which the claim needs): it would sort every key kept. This
// reads at most Limit keys per tenant, and tenants are few.
//
// The keyset cursor ($5, $6, $7) is (created_at, tenant_id, key) in the
// order of the page; "created_at <= $5" repeats its first column on its
// own so that it bounds the index scan (the row comparison alone is a
// filter). Sent with planWithValues: a generic plan could use neither the
// cursor nor the state filter as an index condition (see there).
var browseSQL = `SELECT ` + viewColumns + `
  FROM (SELECT id AS browse_tenant FROM tenants WHERE $1 = 0 OR id = $1) t
 CROSS JOIN LATERAL (
       SELECT * FROM idempotency_keys
        WHERE tenant_id = t.browse_tenant AND ` + requestStateFilterSQL(2) + `
          AND ($3 = '' OR operation = $3)
          AND ($9 = '' OR ($9 = 'now') = (` + dueAtExpr + ` <= phasepay_now()))
          AND created_at <= phasepay_now() - $4 * interval '1 microsecond'
          AND ($5::timestamptz IS NULL OR created_at <= $5)
          AND ($5::timestamptz IS NULL OR (created_at, tenant_id, key) < ($5, $6, $7))
        ORDER BY created_at DESC, key DESC
        LIMIT $8) k
 ORDER BY created_at DESC, tenant_id DESC, key DESC
 LIMIT $8`

// Browse returns a page of the requests f selects, newest first.
func Browse(ctx context.Context, q DBTX, f BrowseFilter) ([]View, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	var (
		afterAt     *time.Time
		afterTenant int64
		afterKey    string
	)
	if f.After != nil {
		afterAt, afterTenant, afterKey = &f.After.CreatedAt, f.After.TenantID, f.After.Key
	}
	rows, err := q.Query(ctx, browseSQL, planWithValues, f.TenantID, string(f.State), f.Operation,
		max(f.OlderThan, 0).Microseconds(), afterAt, afterTenant, afterKey, f.Limit, string(f.Due))
	if err != nil {
		return nil, fmt.Errorf("browse requests: %w", err)
	}
	views, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (View, error) { return scanView(row) })
	if err != nil {
		return nil, fmt.Errorf("browse requests: %w", err)
	}
	return views, nil
}
