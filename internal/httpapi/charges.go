package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/tenants"
)

// createCharge serves POST /v1/charges.
func (s *server) createCharge(w http.ResponseWriter, r *http.Request) {
	s.runIdempotent(w, r, func(ctx context.Context, tenantID int64, key string, body []byte) (phases.Result, error) {
		return s.cfg.Charges.Create(ctx, tenantID, key, phases.AsSent(body))
	})
}

// captureCharge serves POST /v1/charges/{id}/capture.
func (s *server) captureCharge(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	s.runIdempotent(w, r, func(ctx context.Context, tenantID int64, key string, body []byte) (phases.Result, error) {
		return s.cfg.Charges.Capture(ctx, tenantID, key, id, phases.AsSent(body))
	})
}

// voidCharge serves POST /v1/charges/{id}/void.
func (s *server) voidCharge(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	s.runIdempotent(w, r, func(ctx context.Context, tenantID int64, key string, body []byte) (phases.Result, error) {
		return s.cfg.Charges.Void(ctx, tenantID, key, id, phases.AsSent(body))
	})
}

// runIdempotent serves a POST that moves money under an Idempotency-Key.
// Everything that can be wrong with the request (the key, the media type,
// the body) is refused before the key is claimed, so a client can fix its
// request and retry with the same key. run parses the body (a
// *phases.ParseError when it is invalid) and executes the request, or
// replays its stored answer: a retry with its first attempt's bytes is
// answered without parsing them again (phases.AsSent), any other body is
// fingerprinted as parsed, never as it came (see
// charges.ParseCreateRequest).
func (s *server) runIdempotent(w http.ResponseWriter, r *http.Request,
	run func(ctx context.Context, tenantID int64, key string, body []byte) (phases.Result, error),
) {
	tenant, _ := tenants.FromContext(r.Context())
	key, err := idempotency.KeyFromHeader(r.Header)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body, err := readJSONBody(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}

	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.cfg.RunTimeout)
	defer cancel()
	res, err := run(ctx, tenant.ID, key, body)
	info(r.Context()).outcome = outcomeLabel(res.Outcome, err)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", res.Response.ContentType)
	h.Set("Cache-Control", "no-store")
	if res.Outcome == phases.OutcomeReplay {
		h.Set("Idempotent-Replayed", "true")
	}
	h.Set("Content-Length", strconv.Itoa(len(res.Response.Body)))
	w.WriteHeader(res.Response.Status)
	_, _ = w.Write(res.Response.Body)
}

// outcomeLabel names what the key decided, for the request log line.
func outcomeLabel(outcome phases.Outcome, err error) string {
	switch {
	case errors.As(err, new(*phases.ParseError)):
		return "" // refused before its key decided anything
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

// listCharges serves GET /v1/charges, newest first (see charges.List for
// why its pages stay stable while charges are created).
func (s *server) listCharges(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	p, err := parseListParams(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	cs, err := s.cfg.Charges.List(r.Context(), tenant.ID, p.StartingAfter, p.Limit+1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeList(w, "/v1/charges", cs, p.Limit)
}

// readJSONBody reads the body of a POST whose Content-Type, when sent, must
// be application/json, with no charset or charset=utf-8 (errContentType
// otherwise: a body in UTF-16 would be read as UTF-8). A body that cannot
// be read to its end (malformed chunked encoding, a client gone mid-body)
// is errBodyUnreadable; one past MaxBodyBytes, or not in by the body
// deadline, keeps its own error (413, a disconnect).
func readJSONBody(r *http.Request) ([]byte, error) {
	if cts := r.Header.Values("Content-Type"); len(cts) > 0 {
		mt, ps, err := mime.ParseMediaType(cts[0])
		if len(cts) > 1 || err != nil || mt != "application/json" {
			return nil, errContentType
		}
		if cs, ok := ps["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
			return nil, errContentType
		}
	}
	body, err := io.ReadAll(r.Body)
	if err != nil && !errors.As(err, new(*http.MaxBytesError)) && !errors.Is(err, errBodyTimeout) {
		return nil, fmt.Errorf("%w: %w", errBodyUnreadable, err)
	}
	return body, err
}
