package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// One request's page: where it stands, its life on a time axis, its
// stored answer, its resolutions, and the operator's levers.

type requestData struct {
	Tenant      string
	View        idempotency.View
	LockVersion int64
	TraceID     string
	Answer      *answer
	Timeline    *timelineView
	Resolutions []charges.Resolved
	// ChargeID links the charge the request created or acted on.
	ChargeID string
	// CanRetry and CanResolve say which levers apply to its state;
	// HasPSP whether a resolution can ask the PSP (else only --force).
	CanRetry, CanResolve, HasPSP bool
}

// answer is a stored answer as shown.
type answer struct {
	Status      int
	ContentType string
	Body        string
}

// did are the flashes of a lever that worked, by the did= of the
// redirect that follows it: fixed texts, never an echo of the query.
var did = map[string]string{
	"retried":  "Its next attempt is due now: a reaper makes it at its next pass.",
	"resolved": "Resolved: its answer is stored and the resolution recorded.",
}

func (s *Server) request(r *http.Request) (view, error) {
	q := r.URL.Query()
	d, err := s.requestData(r.Context(), q.Get("tenant"), q.Get("key"))
	if err != nil {
		return view{}, err
	}
	p := page{Title: "Request " + d.View.Key, Nav: "requests", Live: true, Flash: did[q.Get("did")], Data: d}
	if msg := q.Get("refused"); s.auth.refusalOK(r, msg, q.Get("sig")) {
		p.Error = msg
	}
	return view{template: "request", page: p}, nil
}

func (s *Server) requestData(ctx context.Context, tenantName, key string) (*requestData, error) {
	if tenantName == "" || key == "" {
		return nil, badRequest{"A request is named by its tenant and its key."}
	}
	if !validText(tenantName) || !validText(key) {
		return nil, errNotFound
	}
	t, err := tenants.ByName(ctx, s.cfg.Pool, tenantName)
	if errors.Is(err, tenants.ErrTenantNotFound) {
		return nil, errNotFound
	} else if err != nil {
		return nil, err
	}
	v, err := idempotency.GetView(ctx, s.cfg.Pool, t.ID, key)
	if errors.Is(err, idempotency.ErrNotFound) {
		return nil, errNotFound
	} else if err != nil {
		return nil, err
	}
	rec, err := s.keys().Lookup(ctx, s.cfg.Pool, t.ID, key)
	if err != nil {
		return nil, err
	}
	d := &requestData{Tenant: t.Name, View: v, LockVersion: rec.LockVersion, HasPSP: s.cfg.Desk.HasPSP()}
	d.CanRetry = v.State == idempotency.RequestUnfinished || v.State == idempotency.RequestNeedsAttention
	d.CanResolve = v.State == idempotency.RequestNeedsAttention
	if rec.Response != nil {
		d.Answer = &answer{Status: rec.Response.Status, ContentType: rec.Response.ContentType, Body: redactSecrets(prettyJSON(rec.Response.Body))}
	}
	if strings.HasPrefix(v.ObjectID, "ch_") {
		d.ChargeID = v.ObjectID
	} else if strings.HasPrefix(v.ObjectID, "re_") {
		d.ChargeID, err = s.chargeOfRefund(ctx, t.ID, v.ObjectID)
		if err != nil {
			return nil, err
		}
	}
	if d.Resolutions, err = charges.ResolutionsOf(ctx, s.cfg.Pool, rec.ID()); err != nil {
		return nil, err
	}
	if d.Timeline, d.TraceID, err = s.timelineOf(ctx, t.ID, v); err != nil {
		return nil, err
	}
	return d, nil
}

// secretRE matches a webhook signing secret: the stored answer of an
// endpoint's creation carries it (its client may replay it), an
// operator's screen never shows it (operator views print
// whsec_… redacted).
var secretRE = regexp.MustCompile(regexp.QuoteMeta(webhooks.SecretPrefix) + `[A-Za-z0-9]+`)

func redactSecrets(s string) string {
	return secretRE.ReplaceAllLiteralString(s, webhooks.SecretPrefix+"… (redacted)")
}

// validText is a value PostgreSQL can compare with text: anything else
// (invalid UTF-8, NUL) names no tenant and no key.
func validText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// chargeOfRefundSQL finds the charge a refund refunds (its primary key).
const chargeOfRefundSQL = `SELECT charge_id FROM refunds WHERE tenant_id = $1 AND id = $2`

func (s *Server) chargeOfRefund(ctx context.Context, tenantID int64, refundID string) (string, error) {
	var id string
	if err := s.cfg.Pool.QueryRow(ctx, chargeOfRefundSQL, tenantID, refundID).Scan(&id); err != nil {
		return "", fmt.Errorf("charge of refund %s: %w", refundID, err)
	}
	return id, nil
}
