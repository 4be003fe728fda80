package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/jsonbody"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// webhookEndpointsPath is the path of POST /v1/webhook_endpoints, part of
// the fingerprint of a create sent with an Idempotency-Key.
const webhookEndpointsPath = "/v1/webhook_endpoints"

// endpointParams is the body of POST /v1/webhook_endpoints as parsed and
// validated: what the fingerprint covers.
type endpointParams struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
}

// endpointJSON is the webhook endpoint object. Secret only in the answer
// to its creation (and its replays).
type endpointJSON struct {
	ID        string   `json:"id"`
	Object    string   `json:"object"`
	URL       string   `json:"url"`
	Events    []string `json:"events"`
	Secret    *string  `json:"secret,omitempty"`
	CreatedAt string   `json:"created_at"`
	Deleted   bool     `json:"deleted,omitempty"`
}

func newEndpointJSON(ep webhooks.Endpoint) endpointJSON {
	return endpointJSON{ID: ep.ID, Object: "webhook_endpoint", URL: ep.URL, Events: ep.Events,
		CreatedAt: ep.CreatedAt.UTC().Format(time.RFC3339)}
}

// The answer to an endpoint's creation, as its key stores it, holds
// webhooks.RedactedSecret where the answer itself has the secret; a replay
// fills the secret in again from the endpoint while it lives, and answers
// "secret": null once it is deleted. The stored answer never holds the
// secret, so no reader of stored answers (bin/api requests show, a
// backup, a dump) sees it, and DELETE does not have to find and scrub the
// key that created the endpoint (there may be none, and it is another
// table's row): the secret lives in one place, the endpoint's row, which
// must keep it anyway to sign the deliveries still owed for earlier
// events. While the endpoint lives, the first answer and every replay are
// the same bytes.

// storedSecret matches the secret member of a stored answer: the
// placeholder, or a secret an earlier version stored.
var storedSecret = regexp.MustCompile(`"secret":"whsec_[^"]*"`)

// withSecret returns a stored creation answer with its secret member set
// to secret, or to null if the endpoint is gone (!live).
func withSecret(stored []byte, secret string, live bool) []byte {
	loc := storedSecret.FindIndex(stored)
	if loc == nil {
		return stored
	}
	member := []byte(`"secret":null`)
	if live {
		v, _ := json.Marshal(secret)
		member = append([]byte(`"secret":`), v...)
	}
	return slices.Concat(stored[:loc[0]], member, stored[loc[1]:])
}

// replayEndpoint answers a stored creation: the secret filled in while the
// endpoint lives.
func replayEndpoint(ctx context.Context, q events.DBTX, tenantID int64, stored idempotency.Response) (idempotency.Response, error) {
	var ep struct {
		ID string `json:"id"`
	}
	if stored.Status != http.StatusCreated || json.Unmarshal(stored.Body, &ep) != nil {
		return stored, nil
	}
	secret, live, err := webhooks.LiveSecret(ctx, q, tenantID, ep.ID)
	if err != nil {
		return idempotency.Response{}, err
	}
	stored.Body = withSecret(stored.Body, secret, live)
	return stored, nil
}

// decideEndpointKey answers a creation whose key exists: 422 for another
// request, the stored answer for this one. A creation's key is claimed,
// the endpoint made and the answer stored in one transaction, so a key
// never is seen started; another request's running under it is 409.
func decideEndpointKey(ctx context.Context, q events.DBTX, tenantID int64, rec idempotency.Record, fp idempotency.Fingerprint) (idempotency.Response, error) {
	switch idempotency.Decide(rec, fp) {
	case idempotency.Mismatch:
		return idempotency.Response{}, idempotency.ErrMismatch
	case idempotency.Replay:
		return replayEndpoint(ctx, q, tenantID, *rec.Response)
	default:
		return idempotency.Response{}, idempotency.ErrInProgress
	}
}

// createWebhookEndpoint serves POST /v1/webhook_endpoints. Idempotency-Key
// is optional. When sent, the usual rules apply (replay, 422 on another
// request), and a retry is answered from its key before the URL's host is
// resolved: a replay depends on no resolver, and makes no DNS query. Since
// nothing foreign is called, the claim, the endpoint and the stored answer
// commit in one transaction, so the key is never seen unfinished.
func (s *server) createWebhookEndpoint(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	key, err := idempotency.KeyFromHeader(r.Header)
	if errors.Is(err, idempotency.ErrKeyMissing) {
		key, err = "", nil
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := readJSONBody(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var p endpointParams
	if err := jsonbody.Decode(body, &p); err != nil {
		s.writeError(w, r, err)
		return
	}
	if p.Events, err = webhooks.ValidateEvents(p.Events); err != nil {
		s.writeError(w, r, err)
		return
	}
	host, err := webhooks.ParseURL(p.URL)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	req, err := idempotency.CanonicalizeParams(http.MethodPost, webhookEndpointsPath, p)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()

	if key != "" {
		rec, err := s.keys.Peek(ctx, s.cfg.Pool, tenant.ID, key)
		switch {
		case err == nil:
			resp, err := decideEndpointKey(ctx, s.cfg.Pool, tenant.ID, rec, req.Fingerprint)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			writeEndpointAnswer(w, resp, true)
			return
		case !errors.Is(err, idempotency.ErrNotFound):
			s.writeError(w, r, err)
			return
		}
	}
	if err := s.cfg.WebhookGuard.CheckHost(ctx, host); err != nil {
		s.writeError(w, r, err)
		return
	}

	var resp idempotency.Response
	replayed := false
	err = pgx.BeginFunc(ctx, s.cfg.Pool, func(tx pgx.Tx) error {
		var lease *idempotency.Lease
		if key != "" {
			rec, created, err := s.keys.Claim(ctx, tx, idempotency.ClaimParams{TenantID: tenant.ID, Key: key, Request: req,
				Operation: "webhook_endpoints.create"})
			if err != nil {
				return err
			}
			if !created {
				// The same key, created since the peek.
				replayed = true
				resp, err = decideEndpointKey(ctx, tx, tenant.ID, rec, req.Fingerprint)
				return err
			}
			lease = s.keys.LeaseOf(rec)
		}
		ep, err := webhooks.Create(ctx, tx, tenant.ID, p.URL, p.Events)
		if err != nil {
			return err
		}
		out := newEndpointJSON(ep)
		out.Secret = new(webhooks.RedactedSecret)
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		stored := idempotency.Response{Status: http.StatusCreated, ContentType: "application/json", Body: append(b, '\n')}
		resp = stored
		resp.Body = withSecret(stored.Body, ep.Secret, true)
		if lease != nil {
			return lease.Finish(ctx, tx, stored)
		}
		return nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeEndpointAnswer(w, resp, replayed)
}

// writeEndpointAnswer writes a creation's answer, first or replayed.
func writeEndpointAnswer(w http.ResponseWriter, resp idempotency.Response, replayed bool) {
	h := w.Header()
	h.Set("Content-Type", resp.ContentType)
	h.Set("Cache-Control", "no-store")
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}

// listWebhookEndpoints serves GET /v1/webhook_endpoints, newest first,
// without secrets.
func (s *server) listWebhookEndpoints(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	p, err := parseListParams(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	eps, err := webhooks.List(r.Context(), s.cfg.Pool, tenant.ID, p.StartingAfter, p.Limit+1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items := make([]endpointJSON, len(eps))
	for i, ep := range eps {
		items[i] = newEndpointJSON(ep)
	}
	writeList(w, webhookEndpointsPath, items, p.Limit)
}

// deleteWebhookEndpoint serves DELETE /v1/webhook_endpoints/{id}. Once it
// has answered, no event written later is queued for the endpoint (see
// webhooks.Delete); attempts for earlier events go on.
func (s *server) deleteWebhookEndpoint(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	ep, err := webhooks.Delete(r.Context(), s.cfg.Pool, tenant.ID, chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	out := newEndpointJSON(ep)
	out.Deleted = true
	writeJSON(w, http.StatusOK, out)
}
