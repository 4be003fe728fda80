package httpapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/jsonbody"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

var (
	errRouteNotFound    = errors.New("no such route")
	errMethodNotAllowed = errors.New("method not allowed")
	errContentType      = errors.New("Content-Type must be application/json, with no charset or charset=utf-8")
	errBodyUnreadable   = errors.New("the request body could not be read")
)

// Retry-After values, in seconds. A request in progress usually finishes
// within a second; a PSP outage is worth a longer pause.
const (
	retryInProgress     = 1
	retryPSPUnavailable = 2
	// A PostgreSQL restart takes seconds; the contract asks for the 503
	// within 5 s and a retry soon after is what brings the key back.
	retryDatabaseUnavailable = 2
)

// retryAfterError is an error that says how long to wait (Retry-After).
type retryAfterError interface {
	error
	RetryAfterSeconds() int
}

// objectError is an error that names the object (a charge) the request
// created before it stopped, for the problem's charge member.
type objectError interface {
	error
	Object() string
}

// problemFor is the one table from errors to the contract's statuses and
// codes. Anything not listed is an internal error: logged, and answered
// with a generic 500 that leaks nothing.
func problemFor(err error) problem.Problem {
	var (
		verr   *charges.ValidationError
		jerr   *jsonbody.Error
		tooBig *http.MaxBytesError
	)
	switch {
	case errors.Is(err, tenants.ErrUnauthorized):
		return problem.New(http.StatusUnauthorized, problem.Unauthorized, "A valid API key is required: Authorization: Bearer sk_…")
	case errors.Is(err, idempotency.ErrKeyMissing):
		return problem.New(http.StatusBadRequest, problem.IdempotencyKeyMissing, "The Idempotency-Key header is required.")
	case errors.Is(err, idempotency.ErrKeyInvalid):
		return problem.New(http.StatusBadRequest, problem.IdempotencyKeyInvalid, err.Error())
	case errors.As(err, &tooBig):
		return problem.New(http.StatusRequestEntityTooLarge, problem.PayloadTooLarge, "The request body is larger than 64 KiB.")
	case errors.As(err, &verr):
		p := problem.New(http.StatusBadRequest, problem.InvalidRequest, verr.Error())
		p.Errors = verr.Fields
		return p
	case errors.As(err, &jerr):
		p := problem.New(http.StatusBadRequest, problem.InvalidRequest, jerr.Error())
		p.Errors = []problem.FieldError{{Field: jerr.Field, Message: jerr.Message}}
		return p
	case errors.Is(err, webhooks.ErrInvalid):
		p := problem.New(http.StatusBadRequest, problem.InvalidRequest, err.Error())
		p.Errors = webhookFieldErrors(err)
		return p
	case errors.Is(err, webhooks.ErrLimitReached):
		return problem.New(http.StatusBadRequest, problem.EndpointLimitReached, fmt.Sprintf(
			"This account has %d webhook endpoints, the most it may have. Delete one to create another.", webhooks.MaxEndpoints))
	case errors.Is(err, idempotency.ErrBodyInvalid):
		return problem.New(http.StatusBadRequest, problem.InvalidRequest, err.Error())
	case errors.Is(err, errWebhookSignature):
		return problem.New(http.StatusBadRequest, problem.InvalidRequest, "The Stripe-Signature header does not verify with this PSP's webhook secret, or is older than 5 minutes.")
	case errors.Is(err, errWebhookPayload):
		return problem.New(http.StatusBadRequest, problem.InvalidRequest, "The body is not a Stripe event.")
	case errors.Is(err, errBodyUnreadable):
		return problem.New(http.StatusBadRequest, problem.InvalidRequest, "The request body could not be read (e.g. malformed chunked encoding).")
	case errors.Is(err, errContentType):
		return problem.New(http.StatusUnsupportedMediaType, problem.UnsupportedMediaType, err.Error())
	case errors.Is(err, idempotency.ErrMismatch):
		return problem.New(http.StatusUnprocessableEntity, problem.IdempotencyKeyMismatch,
			"This Idempotency-Key was used with a different request. Use a new key for a new request.")
	case errors.Is(err, idempotency.ErrInProgress):
		p := problem.New(http.StatusConflict, problem.IdempotencyKeyInUse,
			"A request with this Idempotency-Key is in progress. Retry after a pause.")
		p.RetryAfter = retryInProgress
		return p
	case errors.Is(err, idempotency.ErrUnresolved):
		// Before the database's case: a request given up after the PSP
		// was unreachable wraps that dial error, which dbstate.Unavailable
		// cannot tell from the database's own.
		return problem.New(http.StatusServiceUnavailable, problem.PaymentUnresolved,
			"This request could not be completed automatically and is waiting for an operator. Retrying will not help until it is resolved.")
	case dbstate.Unavailable(err) && !errors.Is(err, charges.ErrPSPUnavailable):
		// Unreachable, restarting, or past statement_timeout or
		// lock_timeout: the same request will work once it is back, and a
		// key this request held is released as soon as it is (see
		// charges.Service's releaseLater).
		p := problem.New(http.StatusServiceUnavailable, problem.DatabaseUnavailable,
			"The database is unavailable. Retry with the same Idempotency-Key after Retry-After: the request resumes where it stopped.")
		p.RetryAfter = retryDatabaseUnavailable
		return p
	case errors.Is(err, charges.ErrPSPUnavailable), errors.Is(err, idempotency.ErrNotDue):
		p := problem.New(http.StatusServiceUnavailable, problem.PSPUnavailable,
			"The payment service provider's answer is not known yet. Retry with the same Idempotency-Key after Retry-After: the request resumes where it stopped.")
		p.RetryAfter = retryPSPUnavailable
		if ra, ok := errors.AsType[retryAfterError](err); ok {
			p.RetryAfter = ra.RetryAfterSeconds()
		}
		if o, ok := errors.AsType[objectError](err); ok {
			p.Charge = o.Object()
		}
		return p
	case errors.Is(err, charges.ErrChargePending):
		p := problem.New(http.StatusConflict, problem.ChargePending,
			"The charge's authorization is not finished yet. Retry with the same Idempotency-Key after Retry-After.")
		p.RetryAfter = retryInProgress
		if ra, ok := errors.AsType[retryAfterError](err); ok {
			p.RetryAfter = ra.RetryAfterSeconds()
		}
		return p
	case errors.Is(err, errListParams):
		return problem.New(http.StatusBadRequest, problem.InvalidRequest, err.Error())
	case errors.Is(err, webhooks.ErrNotOwed):
		return problem.New(http.StatusNotFound, problem.NotFound,
			"This event was not delivered to that webhook endpoint: the endpoint was created after the event, or is not subscribed to its type.")
	case errors.Is(err, charges.ErrNotFound), errors.Is(err, charges.ErrRefundNotFound),
		errors.Is(err, idempotency.ErrNotFound), errors.Is(err, errRouteNotFound),
		errors.Is(err, events.ErrNotFound), errors.Is(err, webhooks.ErrNotFound):
		return problem.New(http.StatusNotFound, problem.NotFound, "No such resource.")
	case errors.Is(err, errMethodNotAllowed):
		return problem.New(http.StatusMethodNotAllowed, problem.MethodNotAllowed, "Method not allowed on this resource.")
	default:
		return problem.New(http.StatusInternalServerError, problem.Internal, "Internal error. Retrying with the same Idempotency-Key is safe.")
	}
}

// writeError answers with err's problem. Internal errors are logged here,
// once; expected outcomes are not errors and are not logged.
func (s *server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errBodyTimeout) {
		// The client is disconnected, not answered: it sent its body too
		// slowly, and an answer would keep the connection for it.
		s.log.LogAttrs(r.Context(), slog.LevelInfo, "client disconnected: request body too slow",
			slog.String("request_id", middleware.GetReqID(r.Context())))
		panic(http.ErrAbortHandler)
	}
	p := problemFor(err)
	p.RequestID = middleware.GetReqID(r.Context())
	if p.Status == http.StatusUnauthorized {
		// RFC 9110, 11.6.1: a 401 names the scheme that would do.
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	if p.Status >= 500 {
		// An internal error is ours to fix: ERROR. A 503 is a dependency
		// away (the PSP, the database) or a retry that came before its
		// time, which the answer's Retry-After schedules: WARN, so that an
		// outage does not bury a bug in a flood of ERROR lines.
		level := slog.LevelWarn
		if p.Status == http.StatusInternalServerError {
			level = slog.LevelError
		}
		s.log.LogAttrs(r.Context(), level, "request failed",
			slog.String("request_id", p.RequestID), slog.Int("status", p.Status),
			slog.String("error", err.Error()))
	}
	problem.Write(w, p)
}

// webhookFieldErrors is the errors member of an invalid webhook endpoint,
// as every validation error has one: package webhooks words each refusal
// "invalid webhook endpoint: <field>: <what is wrong>" (url or events).
func webhookFieldErrors(err error) []problem.FieldError {
	_, rest, ok := strings.Cut(err.Error(), webhooks.ErrInvalid.Error()+": ")
	field, msg, ok2 := strings.Cut(rest, ": ")
	if !ok || !ok2 || (field != "url" && field != "events") {
		return []problem.FieldError{{Field: "body", Message: rest}}
	}
	return []problem.FieldError{{Field: field, Message: msg}}
}
