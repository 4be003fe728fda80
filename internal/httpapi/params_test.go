package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/stretchr/testify/require"
)

// TestEveryRouteParameterHasAShape: a route registered without an entry
// in routeParams, or with a path parameter the entry does not check, stops
// the process at start-up rather than reach its handler unchecked.
func TestEveryRouteParameterHasAShape(t *testing.T) {
	t.Parallel()
	s := &server{}
	require.Panics(t, func() { s.checkParams("GET", "/v1/widgets/{id}", nil) })
	table := map[string]params{"GET /v1/widgets/{id}/{part}": {path: map[string]check{"id": chargeID}}}
	require.PanicsWithValue(t, `httpapi: GET /v1/widgets/{id}/{part}: path parameter "part" has no check in routeParams`,
		func() { paramsOf(table, "GET", "/v1/widgets/{id}/{part}") })
	for route := range routeParams {
		method, pattern, _ := strings.Cut(route, " ")
		require.NotPanics(t, func() { paramsOf(routeParams, method, pattern) }, route)
	}

	// And no /v1 route is registered around the table.
	router, err := newRouter(Config{MetricsElsewhere: true})
	require.NoError(t, err)
	n := 0
	require.NoError(t, chi.Walk(router, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if strings.HasPrefix(pattern, "/v1/") {
			n++
			require.Contains(t, routeParams, method+" "+pattern)
		}
		return nil
	}))
	require.Len(t, routeParams, n, "every entry is a route")
	require.Equal(t, []string{"id", "rest", "*"}, patternParams("/v1/x/{id}/{rest:[a-z]+}/*"))
}

func TestParameterShapes(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		check check
		ok    []string
		bad   []string
	}{
		{chargeID, []string{"ch_" + strings.Repeat("a", 24), "ch_seed0001", "ch_x"},
			[]string{"", "ch_", "ch_\x00", "ch_\xff", "re_abc", "CH_abc", "ch_a/b", "ch_é", "ch_" + strings.Repeat("a", 65), "xch_a"}},
		{refundID, []string{"re_abc"}, []string{"ch_abc", "re_a-b"}},
		{eventID, []string{"evt_0190a1b2c3d4e5f60718293a4b5c6d"}, []string{"evt_", "ev_1", "evt_\x00"}},
		{endpointID, []string{"we_0a1b"}, []string{"we_0A1B", "we_%00"}},
		{keyShape, []string{"k", "z/z", "z%2Fz", `a"b`, strings.Repeat("k", 255)},
			[]string{"", "a b", "\x00", "\xff", "é", `"k"`, strings.Repeat("k", 256)}},
		{limit, []string{"1", "100"}, []string{"0", "101", "-1", "1.0", "x", "\x00"}},
		{requestState, []string{"completed", "needs_attention", "done"}, []string{"finished", "\x00"}},
		{eventType, []string{"charge.authorized"}, []string{"*", "charge", "\xff"}},
	} {
		for _, v := range tt.ok {
			require.NoError(t, tt.check(v), "%q", v)
		}
		for _, v := range tt.bad {
			require.Error(t, tt.check(v), "%q", v)
		}
	}
}

func TestCheckQuery(t *testing.T) {
	t.Parallel()
	checks := listQuery(chargeID, nil)
	for _, raw := range []string{"", "limit=10", "starting_after=ch_a&limit=1", "starting_after=", "other=%00", "other=1&other=2"} {
		require.NoError(t, checkQuery(raw, checks), raw)
	}
	for raw, detail := range map[string]string{
		"starting_after=%00":        "starting_after: must be a charge id (ch_…)",
		"starting_after=%FF":        "starting_after: must be a charge id (ch_…)",
		"limit=1&limit=2":           "limit: must be given at most once",
		"limit=%zz":                 "query: is not a valid query string",
		"limit=1;starting_after=ch": "query: is not a valid query string",
	} {
		err := checkQuery(raw, checks)
		require.ErrorIs(t, err, errListParams, raw)
		require.EqualError(t, err, detail, raw)
	}
}
