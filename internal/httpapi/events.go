package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/jsonbody"
	"github.com/phasepay/phasepay/internal/problem"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// getEvent serves GET /v1/events/{id}: the event's stored body, the very
// bytes every delivery of it sends.
func (s *server) getEvent(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	ev, err := events.Get(r.Context(), s.cfg.Pool, tenant.ID, chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(ev.Body)+1))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(append(ev.Body, '\n'))
}

// listEvents serves GET /v1/events?type=…, newest first.
func (s *server) listEvents(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	p, err := parseListParams(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var typ events.Type
	if v := r.URL.Query().Get("type"); v != "" {
		if typ, err = events.ParseType(v, false); err != nil {
			s.writeError(w, r, &paramError{name: "type", msg: err.Error()})
			return
		}
	}
	evs, err := events.List(r.Context(), s.cfg.Pool, tenant.ID, typ, p.StartingAfter, p.Limit+1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items := make([]json.RawMessage, len(evs))
	for i, ev := range evs {
		items[i] = ev.Body
	}
	writeList(w, "/v1/events", items, p.Limit)
}

// deliveryJSON is one event's delivery to one endpoint, with its attempts.
type deliveryJSON struct {
	Object        string        `json:"object"`
	Endpoint      string        `json:"endpoint"`
	Status        string        `json:"status"`
	NextAttemptAt *string       `json:"next_attempt_at"`
	Attempts      []attemptJSON `json:"attempts"`
}

type attemptJSON struct {
	Attempt     int     `json:"attempt"`
	AttemptedAt string  `json:"attempted_at"`
	StatusCode  *int    `json:"status_code"`
	LatencyMS   int     `json:"latency_ms"`
	Error       *string `json:"error"`
}

// listEventDeliveries serves GET /v1/events/{id}/deliveries: every
// endpoint the event is (or was) delivered to, with each attempt's
// status, latency and error. Not paginated: an event has one delivery per
// endpoint subscribed when it was written.
func (s *server) listEventDeliveries(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	id := chi.URLParam(r, "id")
	ds, err := webhooks.Deliveries(r.Context(), s.cfg.Pool, tenant.ID, id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items := make([]deliveryJSON, len(ds))
	for i, d := range ds {
		items[i] = deliveryJSON{Object: "webhook_delivery", Endpoint: d.EndpointID, Status: d.State,
			NextAttemptAt: timeOrNil(d.NextAttemptAt), Attempts: []attemptJSON{}}
		for _, a := range d.Attempts {
			aj := attemptJSON{Attempt: a.Attempt, AttemptedAt: a.AttemptedAt.UTC().Format(time.RFC3339Nano),
				LatencyMS: a.LatencyMS, Error: stringOrNil(a.Error)}
			if a.StatusCode != 0 {
				aj.StatusCode = &a.StatusCode
			}
			items[i].Attempts = append(items[i].Attempts, aj)
		}
	}
	writeList(w, "/v1/events/"+id+"/deliveries", items, len(items))
}

// redeliverParams is the body of POST /v1/events/{id}/redeliver: empty,
// {}, or the one endpoint to redeliver to.
type redeliverParams struct {
	Endpoint *string `json:"endpoint"`
}

// redeliveryJSON answers a redelivery: the endpoints the event's next
// attempt is now due at.
type redeliveryJSON struct {
	Object    string   `json:"object"`
	Event     string   `json:"event"`
	Endpoints []string `json:"endpoints"`
}

// redeliverEvent serves POST /v1/events/{id}/redeliver: a new attempt of
// the event, due now, at every live endpoint it was owed to (or the one
// named), also after its retries were given up or it succeeded; 202, and
// the deliverers do the rest. Recorded in webhook_redeliveries as the
// tenant's. It moves no money and changes no object, so it takes no
// Idempotency-Key: asking twice makes one more attempt due, no more.
func (s *server) redeliverEvent(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	body, err := readJSONBody(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var p redeliverParams
	if len(body) > 0 {
		if err := jsonbody.Decode(body, &p); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	rd := webhooks.Redelivery{TenantID: tenant.ID, EventID: chi.URLParam(r, "id"), By: webhooks.ByTenant, Via: webhooks.ViaAPI}
	if p.Endpoint != nil {
		if err := endpointID(*p.Endpoint); err != nil {
			s.writeError(w, r, &charges.ValidationError{Fields: []problem.FieldError{{Field: "endpoint", Message: err.Error()}}})
			return
		}
		rd.EndpointID = *p.Endpoint
	}
	done, err := webhooks.Redeliver(r.Context(), s.cfg.Pool, rd)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.log.InfoContext(r.Context(), "webhook redelivery", "tenant", tenant.Name, "event", rd.EventID,
		"endpoint", rd.EndpointID, "deliveries", done.Deliveries, "request_id", middleware.GetReqID(r.Context()))
	writeJSON(w, http.StatusAccepted, redeliveryJSON{Object: "event_redelivery", Event: rd.EventID, Endpoints: done.Endpoints})
}
