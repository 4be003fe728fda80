package httpapi

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/phasepay/phasepay/internal/events"
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
