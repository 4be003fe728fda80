package httpapi

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/tenants"
)

// The tenant's view of a request's timeline (GET
// /v1/idempotency_keys/{key}/timeline): the kinds and fields the contract
// names, and nothing else. A whitelist, kind by kind, rather than the
// stored entries with fields taken out: the stored ones name processes
// (holder), PSP keys and raw causes (detail), and a field added to them
// later must not reach a tenant by default.

// timelineTime is the format of a timeline's times: RFC 3339 in UTC, to the
// microsecond, as they are stored (entries of one transaction share one).
const timelineTime = "2006-01-02T15:04:05.000000Z07:00"

type (
	claimedJSON struct {
		At   string `json:"at"`
		Kind string `json:"kind"`
	}
	reachedJSON struct {
		At            string `json:"at"`
		Kind          string `json:"kind"`
		RecoveryPoint string `json:"recovery_point"`
	}
	releasedJSON struct {
		At            string  `json:"at"`
		Kind          string  `json:"kind"`
		Reason        string  `json:"reason"`
		NextAttemptAt *string `json:"next_attempt_at"`
	}
	takenOverJSON struct {
		At   string `json:"at"`
		Kind string `json:"kind"`
		By   string `json:"by"`
	}
	pspCallJSON struct {
		At         string `json:"at"`
		Kind       string `json:"kind"`
		PSP        string `json:"psp"`
		Operation  string `json:"operation"`
		Outcome    string `json:"outcome"`
		Status     *int   `json:"status"`
		DurationMS int64  `json:"duration_ms"`
	}
	finishedJSON struct {
		At             string `json:"at"`
		Kind           string `json:"kind"`
		ResponseStatus int    `json:"response_status"`
	}
	movedJSON struct {
		At   string `json:"at"`
		Kind string `json:"kind"`
		PSP  string `json:"psp"`
	}
	// operatorJSON is an operator's act: retried, resolved (with as) or
	// resolution_refused (with as). By is always "operator": the
	// operator's name and reason are for operators alone.
	operatorJSON struct {
		At   string `json:"at"`
		Kind string `json:"kind"`
		By   string `json:"by"`
		As   string `json:"as,omitempty"`
	}
)

// tenantEntry is e as a tenant sees it, or nil for a kind the contract
// does not show a tenant.
func tenantEntry(e idempotency.Entry) any {
	at, kind := e.At.UTC().Format(timelineTime), string(e.Kind)
	switch e.Kind {
	case idempotency.KindClaimed:
		return claimedJSON{at, kind}
	case idempotency.KindReached:
		return reachedJSON{at, kind, string(e.RecoveryPoint)}
	case idempotency.KindReleased:
		var next *string
		if e.NextAttemptAt != nil {
			s := e.NextAttemptAt.UTC().Format(timelineTime)
			next = &s
		}
		return releasedJSON{at, kind, e.Reason, next}
	case idempotency.KindTakenOver:
		by := e.By
		if by != idempotency.RoleReaper {
			by = idempotency.RoleAPI // an operator's takeover is the api's, to a tenant
		}
		return takenOverJSON{at, kind, by}
	case idempotency.KindPSPCall:
		var ms int64
		if e.DurationMS != nil {
			ms = *e.DurationMS
		}
		return pspCallJSON{at, kind, e.PSP, e.Operation, e.Outcome, e.Status, ms}
	case idempotency.KindFinished:
		return finishedJSON{at, kind, e.ResponseStatus}
	case idempotency.KindMoved:
		return movedJSON{at, kind, e.PSP}
	case idempotency.KindRetried:
		return operatorJSON{at, kind, idempotency.RoleOperator, ""}
	case idempotency.KindResolved, idempotency.KindResolutionRefused:
		return operatorJSON{at, kind, idempotency.RoleOperator, e.As}
	}
	return nil
}

// getKeyTimeline serves GET /v1/idempotency_keys/{key}/timeline: the life
// of the request of one of the tenant's keys, oldest first. Another
// tenant's key answers 404, as an unknown one. A key holding "/" is
// percent-encoded (as for GET /v1/idempotency_keys/{key}), so that it is
// one segment of the path; checkParams has decoded it, once.
func (s *server) getKeyTimeline(w http.ResponseWriter, r *http.Request) {
	tenant, _ := tenants.FromContext(r.Context())
	h, err := idempotency.ReadHistory(r.Context(), s.cfg.Pool, tenant.ID, chi.URLParam(r, "key"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	data := make([]any, 0, len(h.Entries))
	for _, e := range h.Entries {
		if te := tenantEntry(e); te != nil {
			data = append(data, te)
		}
	}
	writeJSON(w, http.StatusOK, struct {
		Object  string `json:"object"`
		Data    []any  `json:"data"`
		HasMore bool   `json:"has_more"`
	}{"list", data, false})
}
