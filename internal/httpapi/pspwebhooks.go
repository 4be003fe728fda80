package httpapi

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/psp/stripepsp"
)

// pspWebhooksPrefix is the path of POST /v1/psp_webhooks/{psp}: a PSP's own
// webhooks (Stripe's), which carry the PSP's signature instead of a
// tenant's API key.
const pspWebhooksPrefix = "/v1/psp_webhooks/"

// The refusals of a PSP webhook, each a 400 invalid_request.
var (
	errWebhookSignature = errors.New("the webhook's signature does not verify")
	errWebhookPayload   = errors.New("the webhook's payload is not an event")
)

// pspWebhook is POST /v1/psp_webhooks/{psp}: a Stripe event, verified with
// the PSP's PSP_<NAME>_WEBHOOK_SECRET (stripe-go's webhook package). A
// payment_intent.* event for one of phasepay's charges makes that charge's
// unfinished authorization due, with the PaymentIntent's id as a hint
// (charges.Service.PSPReport); the run that resumes it settles it. Any
// other verified event is acknowledged and ignored. 200 {"received":
// true}; 400 for a signature that does not verify; 404 for a PSP with no
// webhook secret.
func (s *server) pspWebhook(w http.ResponseWriter, r *http.Request) {
	name := chi.URLParam(r, "psp")
	secret := s.cfg.PSPWebhookSecrets[name]
	if secret == "" {
		s.writeError(w, r, errRouteNotFound)
		return
	}
	body, err := readJSONBody(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	report, ours, err := stripepsp.ParseWebhook(body, r.Header.Get("Stripe-Signature"), secret)
	switch {
	case errors.Is(err, stripepsp.ErrWebhookSignature):
		s.log.LogAttrs(r.Context(), slog.LevelWarn, "psp webhook refused: signature does not verify", slog.String("psp", name))
		s.writeError(w, r, errWebhookSignature)
		return
	case err != nil:
		s.writeError(w, r, fmt.Errorf("%w: %w", errWebhookPayload, err))
		return
	}
	info(r.Context()).outcome = "psp_webhook_ignored"
	if ours {
		due, err := s.cfg.Charges.PSPReport(r.Context(), report.TenantID, report.Charge, name, report.PaymentIntent)
		switch {
		case errors.Is(err, charges.ErrNotFound):
			// Not a charge of this database (another installation on the
			// same Stripe account): acknowledged, so Stripe stops.
		case err != nil:
			s.writeError(w, r, err)
			return
		case due:
			info(r.Context()).outcome = "psp_webhook_made_due"
			s.log.LogAttrs(r.Context(), slog.LevelInfo, "psp webhook made a charge's authorization due",
				slog.String("psp", name), slog.String("event", report.EventID), slog.String("type", report.Type),
				slog.String("charge", report.Charge), slog.String("payment_intent", report.PaymentIntent))
		default:
			info(r.Context()).outcome = "psp_webhook_settled_already"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, `{"received":true}`+"\n")
}

// isPSPWebhook reports whether r is for POST /v1/psp_webhooks/{psp}, which
// authenticates by the PSP's signature, not a tenant's key.
func isPSPWebhook(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, pspWebhooksPrefix) }
