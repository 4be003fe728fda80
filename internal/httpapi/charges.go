package httpapi

import (
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/tenants"
)

// createCharge serves POST /v1/charges. Everything that can be wrong with
// the request is checked before the key is claimed, so a client can fix its
// request and retry with the same key.
func (s *server) createCharge(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	key, err := idempotency.KeyFromHeader(r.Header)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			s.writeError(w, r, errContentType)
			return
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The fingerprint is taken from what was parsed, never from the bytes
	// that came: see charges.ParseCreateRequest.
	req, params, err := charges.ParseCreateRequest(body)
	if err != nil {
		s.writeError(w, r, err)
		return
	}

	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.RunTimeout)
	defer cancel()
	res, err := s.cfg.Charges.Create(ctx, tenant.ID, key, req, params)
	info(r.Context()).outcome = outcomeLabel(res.Outcome, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", res.Response.ContentType)
	h.Set("Cache-Control", "no-store")
	if res.Outcome == charges.OutcomeReplay {
		h.Set("Idempotent-Replayed", "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(res.Response.Body)))
	w.WriteHeader(res.Response.Status)
	_, _ = w.Write(res.Response.Body)
}

// outcomeLabel names what the key decided, for the request log line.
func outcomeLabel(outcome charges.Outcome, err error) string {
	switch {
	case errors.Is(err, idempotency.ErrMismatch):
		return "mismatch"
	case errors.Is(err, idempotency.ErrInProgress):
		return "in_progress"
	case err != nil && outcome == "":
		return "error"
	}
	return string(outcome)
}

// getCharge serves GET /v1/charges/{id}.
func (s *server) getCharge(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	c, err := s.cfg.Charges.Get(r.Context(), tenant.ID, chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := c.MarshalJSON()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(body, '\n'))
}
