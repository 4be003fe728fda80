package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// Every path parameter and query value a route reads is checked here,
// before its handler runs and so before any SQL: a value no object can
// have (U+0000, invalid UTF-8, a wrong shape) is answered like an unknown
// one — 404 for a path id, 400 invalid_request for a query value — and
// never reaches PostgreSQL, whose text type refuses NUL and invalid UTF-8
// with an error (SQLSTATE 22021) that was a 500 and an ERROR log line any
// tenant could trip at will.

// check says whether v, decoded, is a value the parameter can have: nil,
// or what it must be (the detail of a query value's 400).
type check func(v string) error

// params is what one route reads: its path parameters (every one the
// pattern names, "*" included) and the query parameters it knows. Query
// parameters a route does not read are ignored, as they always were.
type params struct {
	path, query map[string]check
}

// routeParams is the one table of every /v1 route's parameters, by method
// and pattern. NewHandler registers each route through checkParams, which
// refuses (panics at start-up) a route missing here or a path parameter
// without a check, so a new route cannot skip the checks.
var routeParams = map[string]params{
	"POST /v1/charges":                        {},
	"GET /v1/charges":                         {query: listQuery(chargeID, nil)},
	"GET /v1/charges/{id}":                    {path: map[string]check{"id": chargeID}},
	"POST /v1/charges/{id}/capture":           {path: map[string]check{"id": chargeID}},
	"POST /v1/charges/{id}/void":              {path: map[string]check{"id": chargeID}},
	"POST /v1/refunds":                        {},
	"GET /v1/refunds":                         {query: listQuery(refundID, map[string]check{"charge": chargeID})},
	"GET /v1/refunds/{id}":                    {path: map[string]check{"id": refundID}},
	"GET /v1/idempotency_keys":                {query: listQuery(keyShape, map[string]check{"state": requestState})},
	"GET /v1/idempotency_keys/*":              {path: map[string]check{"*": keyShape}},
	"GET /v1/idempotency_keys/{key}/timeline": {path: map[string]check{"key": keyShape}},
	"GET /v1/events":                          {query: listQuery(eventID, map[string]check{"type": eventType})},
	"GET /v1/events/{id}":                     {path: map[string]check{"id": eventID}},
	"GET /v1/events/{id}/deliveries":          {path: map[string]check{"id": eventID}},
	"POST /v1/events/{id}/redeliver":          {path: map[string]check{"id": eventID}},
	"POST /v1/webhook_endpoints":              {},
	"GET /v1/webhook_endpoints":               {query: listQuery(endpointID, nil)},
	"DELETE /v1/webhook_endpoints/{id}":       {path: map[string]check{"id": endpointID}},
	"POST /v1/psp_webhooks/{psp}":             {path: map[string]check{"psp": pspName}},
}

// pspNameRE is the shape of a PSP's name (internal/routing, PSPS).
var pspNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// pspName accepts a PSP's name.
func pspName(v string) error {
	if !pspNameRE.MatchString(v) {
		return errors.New("not a PSP name")
	}
	return nil
}

// listQuery is the query of a list: limit, starting_after (an id of the
// listed objects, after) and the list's own filters, more.
func listQuery(after check, more map[string]check) map[string]check {
	q := map[string]check{"limit": limit, "starting_after": after}
	for name, c := range more {
		q[name] = c
	}
	return q
}

// idPattern is the shape of every object id: its prefix and lower-case
// letters and digits (24 of them for charges, refunds and endpoints, 30
// for events), with room for other lengths, since nothing is gained by
// turning a well-shaped unknown id into anything but the 404 the database
// answers.
var idPattern = regexp.MustCompile(`^[a-z]{2,3}_[0-9a-z]{1,64}$`)

// idCheck accepts the ids that start with prefix.
func idCheck(prefix, what string) check {
	return func(v string) error {
		if strings.HasPrefix(v, prefix) && idPattern.MatchString(v) {
			return nil
		}
		return fmt.Errorf("must be %s (%s…)", what, prefix)
	}
}

var (
	chargeID   = idCheck("ch_", "a charge id")
	refundID   = idCheck("re_", "a refund id")
	eventID    = idCheck("evt_", "an event id")
	endpointID = idCheck("we_", "a webhook endpoint id")
)

// keyShape accepts an idempotency key as it is stored: 1 to 255 visible
// ASCII characters (idempotency.ParseKey, without its quoted form, which
// no stored key has).
func keyShape(v string) error {
	if k, err := idempotency.ParseKey(v); err != nil || k != v {
		return fmt.Errorf("must be an idempotency key (1 to %d visible ASCII characters)", idempotency.MaxKeyLength)
	}
	return nil
}

func limit(v string) error {
	if n, err := strconv.Atoi(v); err != nil || n < 1 || n > listLimitMax {
		return fmt.Errorf("must be an integer from 1 to %d", listLimitMax)
	}
	return nil
}

// requestState accepts a request state or an alias of one
// (idempotency.ParseRequestState).
func requestState(v string) error {
	if _, err := idempotency.ParseRequestState(v); err != nil {
		names := make([]string, 0, 4)
		for _, st := range idempotency.RequestStates() {
			names = append(names, string(st))
		}
		return fmt.Errorf("must be one of %s", strings.Join(names, ", "))
	}
	return nil
}

func eventType(v string) error {
	if _, err := events.ParseType(v, false); err != nil {
		return errors.New("must be an event type, e.g. charge.authorized")
	}
	return nil
}

// checkParams returns next behind the checks of the route method pattern
// (routeParams). A path parameter that does not pass is 404, as an unknown
// id; a query value, a query parameter given twice or a query string that
// does not decode is 400 invalid_request.
//
// It also leaves every path parameter decoded exactly once, in place, for
// chi.URLParam: chi matches on the escaped path (r.URL.RawPath) when
// net/http kept one, that is when the client escaped something it need not
// have, and on the decoded path otherwise, so a parameter reached the
// handlers escaped or not depending on the client's spelling, and a
// handler that decoded it again read "z%252Fz" as "z/z".
func (s *server) checkParams(method, pattern string, next http.HandlerFunc) http.HandlerFunc {
	p := paramsOf(routeParams, method, pattern)
	return func(w http.ResponseWriter, r *http.Request) {
		if err := decodePathParams(r, p.path); err != nil {
			s.writeError(w, r, errRouteNotFound)
			return
		}
		if err := checkQuery(r.URL.RawQuery, p.query); err != nil {
			s.writeError(w, r, err)
			return
		}
		next(w, r)
	}
}

// paramsOf returns table's entry for the route method pattern. It panics
// if there is none, or if a path parameter of pattern has no check: a
// programming error, found at start-up.
func paramsOf(table map[string]params, method, pattern string) params {
	p, ok := table[method+" "+pattern]
	if !ok {
		panic(fmt.Sprintf("httpapi: %s %s is not in routeParams", method, pattern))
	}
	for _, name := range patternParams(pattern) {
		if p.path[name] == nil {
			panic(fmt.Sprintf("httpapi: %s %s: path parameter %q has no check in routeParams", method, pattern, name))
		}
	}
	return p
}

// patternParams names the parameters of a chi pattern: each {name} (or
// {name:regexp}) and a trailing *.
func patternParams(pattern string) []string {
	var names []string
	for _, seg := range strings.Split(pattern, "/") {
		switch {
		case seg == "*":
			names = append(names, "*")
		case strings.HasPrefix(seg, "{") && strings.HasSuffix(seg, "}"):
			name, _, _ := strings.Cut(seg[1:len(seg)-1], ":")
			names = append(names, name)
		}
	}
	return names
}

// decodePathParams decodes the route's path parameters once, checks each
// and writes it back for chi.URLParam. The route's value of a name is the
// last one in the list (as chi.URLParam reads it): a mounted router's "*"
// comes before.
func decodePathParams(r *http.Request, checks map[string]check) error {
	rp := &chi.RouteContext(r.Context()).URLParams
	for name, ok := range checks {
		i := lastIndex(rp.Keys, name)
		if i < 0 {
			return fmt.Errorf("path parameter %q missing", name)
		}
		v := rp.Values[i]
		if r.URL.RawPath != "" {
			var err error
			if v, err = url.PathUnescape(v); err != nil {
				return err
			}
		}
		if err := ok(v); err != nil {
			return err
		}
		rp.Values[i] = v
	}
	return nil
}

func lastIndex(keys []string, name string) int {
	for i := len(keys) - 1; i >= 0; i-- {
		if keys[i] == name {
			return i
		}
	}
	return -1
}

// checkQuery checks the query parameters the route knows. r.URL.Query()
// drops what does not decode without a word, which would read a malformed
// starting_after as none and answer the first page.
func checkQuery(raw string, checks map[string]check) error {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return &paramError{name: "query", msg: "is not a valid query string"}
	}
	for name, vs := range q {
		ok := checks[name]
		if ok == nil {
			continue
		}
		switch {
		case len(vs) > 1:
			return &paramError{name: name, msg: "must be given at most once"}
		case vs[0] == "":
			continue // read as absent, as it always was
		}
		if err := ok(vs[0]); err != nil {
			return &paramError{name: name, msg: err.Error()}
		}
	}
	return nil
}
