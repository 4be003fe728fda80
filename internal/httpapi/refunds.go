package httpapi

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/tenants"
)

// createRefund serves POST /v1/refunds.
func (s *server) createRefund(w http.ResponseWriter, r *http.Request) {
	s.runIdempotent(w, r, func(ctx context.Context, tenantID int64, key string, body []byte) (phases.Result, error) {
		return s.cfg.Charges.Refund(ctx, tenantID, key, phases.AsSent(body))
	})
}

// getRefund serves GET /v1/refunds/{id}. Another tenant's refund is not
// found, exactly as an unknown id.
func (s *server) getRefund(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	ref, err := s.cfg.Charges.GetRefund(r.Context(), tenant.ID, chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ref)
}

// listRefunds serves GET /v1/refunds?charge=ch_…, newest first: the refunds
// of one charge, or all of the tenant's without charge. Another tenant's
// charge answers 404, as an unknown one.
func (s *server) listRefunds(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	p, err := parseListParams(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	rs, err := s.cfg.Charges.ListRefunds(r.Context(), tenant.ID, r.URL.Query().Get("charge"), p.StartingAfter, p.Limit+1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeList(w, "/v1/refunds", rs, p.Limit)
}
