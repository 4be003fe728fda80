package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/operator"
	"github.com/phasepay/phasepay/internal/tenants"
)

// The operator's levers, from the request's page: POST forms carrying the
// session's CSRF token (auth.go), acting through the operator desk, the
// same code as `api requests retry|resolve`. Whether a lever acted or was
// refused, it redirects to the request's page (POST-redirect-GET), saying
// which: a reload does not post again, and the page's live stream asks for
// the page's own address, never a lever's (which answers POST only).

func (s *Server) retry(w http.ResponseWriter, r *http.Request) {
	tenant, key := r.PostFormValue("tenant"), r.PostFormValue("key")
	if !validText(tenant) || !validText(key) {
		s.fail(w, r, errNotFound)
		return
	}
	// The operator names themselves, as --by does on the command line:
	// a retry recorded under no one's name tells an incident's review
	// nothing.
	var err error
	switch by := strings.TrimSpace(r.PostFormValue("by")); {
	case by == "":
		err = badRequest{"Your name is required: it is recorded with the retry."}
	case !validText(by):
		err = badRequest{"The name must be text."}
	default:
		s.cfg.Logger.Info("console: retrying a request", "tenant", tenant, "key", key, "by", by)
		_, err = s.cfg.Desk.Retry(r.Context(), tenant, key, by)
	}
	s.acted(w, r, tenant, key, "retried", err)
}

func (s *Server) resolve(w http.ResponseWriter, r *http.Request) {
	tenant, key := r.PostFormValue("tenant"), r.PostFormValue("key")
	if !validText(tenant) || !validText(key) {
		s.fail(w, r, errNotFound)
		return
	}
	res := charges.Resolution{
		As:     charges.ResolveAs(r.PostFormValue("as")),
		Reason: strings.TrimSpace(r.PostFormValue("reason")),
		By:     strings.TrimSpace(r.PostFormValue("by")),
		Force:  r.PostFormValue("force") != "",
	}
	var err error
	switch {
	case res.As != charges.ResolveFailed && res.As != charges.ResolveSucceeded:
		err = badRequest{"Resolve as failed or as succeeded."}
	case res.Reason == "" || res.By == "":
		err = badRequest{"A reason and your name are required: both are recorded with the resolution."}
	case !validText(res.Reason) || !validText(res.By):
		err = badRequest{"The reason and the name must be text."}
	default:
		s.cfg.Logger.Info("console: resolving a request", "tenant", tenant, "key", key, "as", string(res.As), "by", res.By, "force", res.Force)
		_, _, err = s.cfg.Desk.Resolve(r.Context(), tenant, key, res)
	}
	s.acted(w, r, tenant, key, "resolved", err)
}

// acted answers a lever with a redirect to the request's page: with the
// fixed text of what it did, or with the reason it did not act, signed for
// the session (auth.go) so that no link of anyone else's can put words
// on the page.
func (s *Server) acted(w http.ResponseWriter, r *http.Request, tenant, key, what string, err error) {
	if err == nil {
		http.Redirect(w, r, requestURL(tenant, key)+"&"+url.Values{"did": {what}}.Encode(), http.StatusSeeOther)
		return
	}
	status, msg := leverRefusal(err)
	if status == http.StatusInternalServerError {
		s.cfg.Logger.Error("console: "+what+" failed", "tenant", tenant, "key", key, "error", err.Error())
	}
	q := url.Values{"refused": {msg}, "sig": {s.auth.signRefusal(r, msg)}}
	http.Redirect(w, r, requestURL(tenant, key)+"&"+q.Encode(), http.StatusSeeOther)
}

// leverRefusal is the status and the operator-facing reason of a lever
// that did not act. The operator sees what the PSP said (the console is
// not the tenant's view, whose texts hide it); an error of no known kind
// is logged and shown in general words.
func leverRefusal(err error) (int, string) {
	var bad badRequest
	switch {
	case errors.As(err, &bad):
		return http.StatusBadRequest, bad.msg
	case errors.Is(err, tenants.ErrTenantNotFound), errors.Is(err, idempotency.ErrNotFound):
		return http.StatusNotFound, "No such request."
	case errors.Is(err, idempotency.ErrFinished):
		return http.StatusConflict, "It is completed: there is nothing to retry."
	case errors.Is(err, idempotency.ErrNotNeedsAttention):
		return http.StatusConflict, "Only a needs_attention request can be resolved; this one is not (any more)."
	case errors.Is(err, charges.ErrResolutionContradicted), errors.Is(err, charges.ErrPSPLookupFailed),
		errors.Is(err, operator.ErrPSPRequired):
		return http.StatusConflict, "Not resolved: " + oneLine(err.Error())
	}
	return http.StatusInternalServerError, "Not done: the console could not act; see its log."
}
