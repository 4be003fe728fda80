package httpapi

import (
	"context"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/telemetry"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// fuzzRoute is one route of the router, as chi.Walk reports it.
type fuzzRoute struct {
	method, pattern string
	query           []string // the query parameters it reads, sorted
}

// patternParam is a path parameter of a chi pattern: {name} or a trailing *.
var patternParam = regexp.MustCompile(`\{[^}]*\}|\*$`)

// awkward are values no object can have, and a few it can: the seeds every
// route gets in every path and query parameter.
var awkward = []string{"%00", "%FF", "%C3%28", "ch_%00", "%25", "%zz", "a%2Fb", "z%252Fz", "%20", "",
	"ch_" + strings.Repeat("a", 24), "evt_0", "we_0", "re_0", strings.Repeat("x", 300), "%E2%80%AE", "..", "%2e%2e"}

// FuzzRouteParams sends every route on the router, found by walking it (a
// route added later is fuzzed without a change here), a fuzzed value in
// each of its path parameters and in one query parameter, authenticated,
// and requires an answer below 500: a 500 from input is an alert any
// tenant can raise at will (before, NUL or invalid UTF-8 in an id or
// query value reached PostgreSQL, which refused it with SQLSTATE 22021).
//
// The route is named by its "METHOD pattern" (any other string picks one
// by its hash) and the query parameter by its name (one the route reads,
// picked by hash, when the name is not one of them), so that the corpus in
// testdata/fuzz/FuzzRouteParams stays meaningful as routes come and go.
func FuzzRouteParams(f *testing.F) {
	ctx := context.Background()
	pool := testdb.Pool(f, testdb.NewURL(f), time.Time{})
	keys, err := idempotency.NewStore(idempotency.Config{Lease: time.Minute})
	require.NoError(f, err)
	mock, err := mockpsp.New(mockpsp.Faults{})
	require.NoError(f, err)
	pspSrv := httptest.NewServer(mock)
	f.Cleanup(pspSrv.Close)
	client, err := psp.NewClient(psp.ClientConfig{BaseURL: pspSrv.URL})
	require.NoError(f, err)
	svc, err := charges.NewService(pool, keys, client, phases.Config{})
	require.NoError(f, err)
	f.Cleanup(svc.Wait)
	tel, err := telemetry.New(ctx, "httpapi-fuzz")
	require.NoError(f, err)
	f.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	router, err := newRouter(Config{Pool: pool, Charges: svc, Telemetry: tel, Logger: telemetry.NewLogger(io.Discard)})
	require.NoError(f, err)
	_, key, err := tenants.CreateKey(ctx, pool, "fuzz")
	require.NoError(f, err)

	var routes []fuzzRoute
	require.NoError(f, chi.Walk(router, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		rt := fuzzRoute{method: method, pattern: pattern}
		for name := range routeParams[method+" "+pattern].query {
			rt.query = append(rt.query, name)
		}
		slices.Sort(rt.query)
		routes = append(routes, rt)
		return nil
	}))
	require.Greater(f, len(routes), len(routeParams), "the walk found every /v1 route and the others")

	// A few seeds per route, so that a new route is seeded too; the
	// awkward values go round the routes (more would only slow the
	// fuzzer's start: it runs every seed before it mutates any).
	for i, rt := range routes {
		name := rt.method + " " + rt.pattern
		f.Add(name, "%00", "starting_after", "%FF")
		f.Add(name, awkward[i%len(awkward)], "starting_after", awkward[(i+1)%len(awkward)])
		for _, q := range rt.query {
			f.Add(name, "x", q, awkward[(i+len(q))%len(awkward)])
		}
	}

	f.Fuzz(func(t *testing.T, route, pathValue, queryName, queryValue string) {
		rt := pick(routes, route)
		if len(rt.query) > 0 && !slices.Contains(rt.query, queryName) {
			queryName = rt.query[hash(queryName)%uint32(len(rt.query))]
		}
		target := patternParam.ReplaceAllLiteralString(rt.pattern, pathValue) + "?" + queryName + "=" + queryValue
		// What net/http's server would refuse before any handler runs
		// (a request line it cannot parse) is not the handler's to answer.
		u, err := url.ParseRequestURI(target)
		if err != nil || strings.ContainsAny(target, " \t\r\n") {
			return
		}
		req := httptest.NewRequestWithContext(t.Context(), rt.method, "/", strings.NewReader(`{}`))
		req.URL, req.RequestURI = u, target
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", "fuzz")
		rec := httptest.NewRecorder()
		router.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %q answered %d: %s", rt.method, target, rec.Code, rec.Body.String())
		}
	})
}

// pick returns the route named "METHOD pattern", or one picked by name's
// hash.
func pick(routes []fuzzRoute, name string) fuzzRoute {
	for _, rt := range routes {
		if rt.method+" "+rt.pattern == name {
			return rt
		}
	}
	return routes[hash(name)%uint32(len(routes))]
}

func hash(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
