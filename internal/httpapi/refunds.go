package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/tenants"
)

// createRefund serves POST /v1/refunds.
func (s *server) createRefund(w http.ResponseWriter, r *http.Request) {
	s.runIdempotent(w, r, func(body []byte) (idempotency.Canonical, error) {
		req, _, err := charges.ParseRefundRequest(body)
		return req, err
	}, s.cfg.Charges.Refund)
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
