package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/tenants"
)

// keyJSON is the tenant's view of one of its idempotency keys: where its
// request stands; never the request body.
type keyJSON struct {
	Object        string `json:"object"`
	Key           string `json:"key"`
	Endpoint      string `json:"endpoint"`
	State         string `json:"state"`
	RecoveryPoint string `json:"recovery_point"`
	// FailedAttempts counts the attempts that ended without finishing;
	// Attempts is the same number, under the name it had first.
	FailedAttempts int     `json:"failed_attempts"`
	Attempts       int     `json:"attempts"`
	NextAttemptAt  *string `json:"next_attempt_at"`
	LastError      *string `json:"last_error"`
	ResponseStatus *int    `json:"response_status"`
	ObjectID       *string `json:"object_id"`
	CreatedAt      string  `json:"created_at"`
	CompletedAt    *string `json:"completed_at"`
}

func newKeyJSON(v idempotency.View) keyJSON {
	return keyJSON{
		Object:         "idempotency_key",
		Key:            v.Key,
		Endpoint:       v.Method + " " + v.Path,
		State:          string(v.State),
		RecoveryPoint:  string(v.Point),
		FailedAttempts: v.Attempts,
		Attempts:       v.Attempts,
		NextAttemptAt:  timeOrNil(v.NextAttemptAt),
		LastError:      stringOrNil(v.LastError),
		ResponseStatus: v.ResponseStatus,
		ObjectID:       stringOrNil(v.ObjectID),
		CreatedAt:      v.CreatedAt.UTC().Format(time.RFC3339),
		CompletedAt:    timeOrNil(v.CompletedAt),
	}
}

// getKey serves GET /v1/idempotency_keys/{key}. A key may contain any
// visible ASCII character, '/' included, so the route takes the rest of
// the path, decoded exactly once by checkParams (a key that holds "%2F"
// is sent as "%252F").
func (s *server) getKey(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	v, err := idempotency.GetView(r.Context(), s.cfg.Pool, tenant.ID, chi.URLParam(r, "*"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, newKeyJSON(v))
}

// listKeys serves GET /v1/idempotency_keys?state=…, newest first. The state
// is one of idempotency.RequestStates, or an alias of one (done).
func (s *server) listKeys(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	p, err := parseListParams(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var state idempotency.RequestState
	if v := r.URL.Query().Get("state"); v != "" {
		if state, err = idempotency.ParseRequestState(v); err != nil {
			s.writeError(w, r, &paramError{name: "state", msg: strings.TrimPrefix(err.Error(), "state ")})
			return
		}
	}
	views, err := idempotency.ListViews(r.Context(), s.cfg.Pool, tenant.ID, state, p.StartingAfter, p.Limit+1)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	items := make([]keyJSON, len(views))
	for i, v := range views {
		items[i] = newKeyJSON(v)
	}
	writeList(w, "/v1/idempotency_keys", items, p.Limit)
}

func timeOrNil(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := t.UTC().Format(time.RFC3339)
	return &s
}

func stringOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
