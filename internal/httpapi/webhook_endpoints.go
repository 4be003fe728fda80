package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5"

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
// to its creation.
type endpointJSON struct {
	ID        string   `json:"id"`
	Object    string   `json:"object"`
	URL       string   `json:"url"`
	Events    []string `json:"events"`
	Secret    string   `json:"secret,omitempty"`
	CreatedAt string   `json:"created_at"`
	Deleted   bool     `json:"deleted,omitempty"`
}

func newEndpointJSON(ep webhooks.Endpoint) endpointJSON {
	return endpointJSON{ID: ep.ID, Object: "webhook_endpoint", URL: ep.URL, Events: ep.Events, Secret: ep.Secret,
		CreatedAt: ep.CreatedAt.UTC().Format(time.RFC3339)}
}

// createWebhookEndpoint serves POST /v1/webhook_endpoints. Idempotency-Key
// is optional. When sent, the usual rules apply (replay, 422 on another
// request); since nothing foreign is called, the claim, the endpoint and
// the stored answer commit in one transaction, so the key is never seen
// unfinished.
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
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if err := webhooks.CheckURL(ctx, p.URL, s.cfg.WebhookAllowPrivate); err != nil {
		s.writeError(w, r, err)
		return
	}
	req, err := idempotency.CanonicalizeParams(http.MethodPost, webhookEndpointsPath, p)
	if err != nil {
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
				switch idempotency.Decide(rec, req.Fingerprint) {
				case idempotency.Mismatch:
					return idempotency.ErrMismatch
				case idempotency.Replay:
					resp, replayed = *rec.Response, true
					return nil
				default:
					// Never left started by this handler; a key of
					// another request in flight.
					return idempotency.ErrInProgress
				}
			}
			lease = s.keys.LeaseOf(rec)
		}
		ep, err := webhooks.Create(ctx, tx, tenant.ID, p.URL, p.Events)
		if err != nil {
			return err
		}
		b, err := json.Marshal(newEndpointJSON(ep))
		if err != nil {
			return err
		}
		resp = idempotency.Response{Status: http.StatusCreated, ContentType: "application/json", Body: append(b, '\n')}
		if lease != nil {
			return lease.Finish(ctx, tx, resp)
		}
		return nil
	})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
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
