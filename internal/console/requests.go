package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/tenants"
)

// The requests page: every tenant's requests, newest first, a page at a
// time (idempotency.Browse), filtered by tenant, state (the tenant view's
// vocabulary, as everywhere), operation and age.

// pageSize is how many requests a page lists.
const pageSize = 50

// operations are the filters by operation: each route phasepay runs
// idempotently, by name.
var operations = []struct{ Name, Operation string }{
	{"charge", "charges.create"},
	{"capture", "charges.capture"},
	{"void", "charges.void"},
	{"refund", "refunds.create"},
	{"webhook endpoint", "webhook_endpoints.create"},
}

// states are the view states, in the tenant view's words: the one
// vocabulary of every interface (docs/api.md).
var states = []idempotency.RequestState{idempotency.RequestInProgress, idempotency.RequestUnfinished, idempotency.RequestNeedsAttention, idempotency.RequestCompleted}

type requestRow struct {
	idempotency.View
	Tenant string
}

type requestsData struct {
	// The filters as given, for the form. Due ("now" or "later") splits
	// the unfinished requests as the overview's cards do.
	Tenant, State, Operation, OlderThan, Due string
	Tenants                                  []string
	States                                   []idempotency.RequestState
	Operations                               []string
	Rows                                     []requestRow
	// Next is the address of the next page, empty on the last.
	Next string
}

// tenantNamesSQL lists the tenants for the filter.
const tenantNamesSQL = `SELECT name FROM tenants ORDER BY name LIMIT 500`

func (s *Server) requests(r *http.Request) (view, error) {
	ctx := r.Context()
	q := r.URL.Query()
	d := requestsData{Tenant: q.Get("tenant"), State: q.Get("state"), Operation: q.Get("operation"), OlderThan: q.Get("older_than"),
		Due: q.Get("due"), States: states}
	for _, o := range operations {
		d.Operations = append(d.Operations, o.Name)
	}
	rows, err := s.cfg.Pool.Query(ctx, tenantNamesSQL)
	if err != nil {
		return view{}, fmt.Errorf("tenants: %w", err)
	}
	if d.Tenants, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return view{}, fmt.Errorf("tenants: %w", err)
	}

	f := idempotency.BrowseFilter{Limit: pageSize + 1}
	if d.Tenant != "" {
		t, err := tenants.ByName(ctx, s.cfg.Pool, d.Tenant)
		if errors.Is(err, tenants.ErrTenantNotFound) {
			return view{}, badRequest{fmt.Sprintf("No tenant is called %q.", d.Tenant)}
		}
		if err != nil {
			return view{}, err
		}
		f.TenantID = t.ID
	}
	if d.State != "" {
		st := d.State
		if st == "done" { // the CLI's alias
			st = string(idempotency.RequestCompleted)
		}
		if f.State, err = idempotency.ParseRequestState(st); err != nil {
			return view{}, badRequest{err.Error()}
		}
	}
	if d.Operation != "" {
		found := false
		for _, o := range operations {
			if o.Name == d.Operation {
				f.Operation, found = o.Operation, true
			}
		}
		if !found {
			return view{}, badRequest{fmt.Sprintf("No operation is called %q.", d.Operation)}
		}
	}
	if d.OlderThan != "" {
		if f.OlderThan, err = time.ParseDuration(d.OlderThan); err != nil || f.OlderThan < 0 {
			return view{}, badRequest{fmt.Sprintf("older than %q: a duration such as 90s, 15m or 2h.", d.OlderThan)}
		}
	}
	switch idempotency.Due(d.Due) {
	case "":
	case idempotency.DueNow, idempotency.DueLater:
		if f.State != idempotency.RequestUnfinished {
			return view{}, badRequest{"due=now and due=later split the unfinished requests: add state=unfinished."}
		}
		f.Due = idempotency.Due(d.Due)
	default:
		return view{}, badRequest{fmt.Sprintf("due %q: now (next attempt has come) or later (waiting for it).", d.Due)}
	}
	if f.After, err = parseCursor(q); err != nil {
		return view{}, badRequest{err.Error()}
	}

	views, err := idempotency.Browse(ctx, s.cfg.Pool, f)
	if err != nil {
		return view{}, err
	}
	if len(views) > pageSize {
		views = views[:pageSize]
		next := url.Values{}
		for k, v := range q {
			next[k] = v
		}
		setCursor(next, idempotency.CursorOf(views[len(views)-1]))
		d.Next = "/requests?" + next.Encode()
	}
	if d.Rows, err = s.withTenantNames(ctx, views); err != nil {
		return view{}, err
	}
	return view{template: "requests", page: page{Title: "Requests", Nav: "requests", Live: f.After == nil, Data: d}}, nil
}

func (s *Server) withTenantNames(ctx context.Context, views []idempotency.View) ([]requestRow, error) {
	ids := make([]int64, 0, len(views))
	for _, v := range views {
		ids = append(ids, v.TenantID)
	}
	names, err := tenants.Names(ctx, s.cfg.Pool, ids)
	if err != nil {
		return nil, err
	}
	out := make([]requestRow, len(views))
	for i, v := range views {
		out[i] = requestRow{View: v, Tenant: names[v.TenantID]}
	}
	return out, nil
}

// The cursor of a page travels in its query: the last request's creation
// time (to the microsecond, as stored), tenant and key.
func setCursor(q url.Values, c idempotency.Cursor) {
	q.Set("after_at", c.CreatedAt.UTC().Format(time.RFC3339Nano))
	q.Set("after_tenant", strconv.FormatInt(c.TenantID, 10))
	q.Set("after_key", c.Key)
}

func parseCursor(q url.Values) (*idempotency.Cursor, error) {
	if q.Get("after_at") == "" {
		return nil, nil
	}
	at, err := time.Parse(time.RFC3339Nano, q.Get("after_at"))
	if err != nil {
		return nil, errors.New("the page's cursor is not valid: start from the first page")
	}
	tenant, err := strconv.ParseInt(q.Get("after_tenant"), 10, 64)
	if err != nil {
		return nil, errors.New("the page's cursor is not valid: start from the first page")
	}
	return &idempotency.Cursor{CreatedAt: at, TenantID: tenant, Key: q.Get("after_key")}, nil
}
