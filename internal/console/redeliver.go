package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// The webhook lever, from an endpoint's page: a new delivery attempt, due
// now, of one event or of the endpoint's events of the last hours, the
// same as `api webhooks redeliver` (webhooks.Redeliver), recorded with the
// operator's name. A POST form with the session's CSRF token; it answers
// with a redirect to the endpoint's page, whose flash says what was done
// or why not (fixed texts, never an echo of the form).

// redeliverWindows are the windows the form offers, by their value.
var redeliverWindows = []struct{ Value, Label string }{
	{"1h", "the last hour"}, {"6h", "the last 6 hours"}, {"24h", "the last day"}, {"72h", "the last 3 days"}, {"168h", "the last week"},
}

// redeliverRefusals are the texts of a redelivery that did not act, by
// the refused= of its redirect.
var redeliverRefusals = map[string]string{
	"name":     "Not redelivered: your name is required, and recorded with the redelivery.",
	"window":   "Not redelivered: choose one of the windows offered.",
	"event":    "Not redelivered: no such event of this tenant (an event id starts with evt_; events older than EVENTS_RETENTION are gone).",
	"not_owed": "Not redelivered: this event was never owed to this endpoint (it was created after the event, or is not subscribed to its type).",
	"endpoint": "Not redelivered: the endpoint is deleted, or not this tenant's.",
	"failed":   "Not redelivered: the console could not act; see its log.",
}

// redeliveredFlash is the flash of a redelivery that acted, by n=.
func redeliveredFlash(q url.Values) string {
	if q.Get("did") != "redelivered" {
		return ""
	}
	n, err := strconv.Atoi(q.Get("n"))
	if err != nil || n < 0 {
		return ""
	}
	return fmt.Sprintf("Redelivery recorded: %d deliveries are due now; the deliverers send them at their next pass.", n)
}

func (s *Server) redeliver(w http.ResponseWriter, r *http.Request) {
	tenant, endpoint := r.PostFormValue("tenant"), r.PostFormValue("endpoint")
	if !validText(tenant) || !validText(endpoint) {
		s.fail(w, r, errNotFound)
		return
	}
	back := func(q url.Values) {
		http.Redirect(w, r, webhookURL(tenant, endpoint)+"&"+q.Encode(), http.StatusSeeOther)
	}
	refused := func(why string) { back(url.Values{"refused": {why}}) }
	by, event := strings.TrimSpace(r.PostFormValue("by")), strings.TrimSpace(r.PostFormValue("event"))
	if by == "" || !validText(by) {
		refused("name")
		return
	}
	if !validText(event) {
		refused("event")
		return
	}
	t, err := tenants.ByName(r.Context(), s.cfg.Pool, tenant)
	if errors.Is(err, tenants.ErrTenantNotFound) {
		s.fail(w, r, errNotFound)
		return
	} else if err != nil {
		s.fail(w, r, err)
		return
	}
	rd := webhooks.Redelivery{TenantID: t.ID, EndpointID: endpoint, EventID: event, By: by, Via: webhooks.ViaConsole}
	if event == "" {
		window, ok := time.Duration(0), false
		for _, o := range redeliverWindows {
			if o.Value == r.PostFormValue("since") {
				window, _ = time.ParseDuration(o.Value)
				ok = true
			}
		}
		if !ok {
			refused("window")
			return
		}
		rd.Until = time.Now()
		rd.From = rd.Until.Add(-window)
	}
	s.cfg.Logger.Info("console: webhook redelivery", "tenant", tenant, "endpoint", endpoint, "event", event, "by", by)
	done, err := webhooks.Redeliver(r.Context(), s.cfg.Pool, rd)
	switch {
	case err == nil:
		back(url.Values{"did": {"redelivered"}, "n": {strconv.Itoa(done.Deliveries)}})
	case errors.Is(err, events.ErrNotFound):
		refused("event")
	case errors.Is(err, webhooks.ErrNotOwed):
		refused("not_owed")
	case errors.Is(err, webhooks.ErrNotFound):
		refused("endpoint")
	default:
		s.cfg.Logger.Error("console: webhook redelivery failed", "tenant", tenant, "endpoint", endpoint, "error", err.Error())
		refused("failed")
	}
}
