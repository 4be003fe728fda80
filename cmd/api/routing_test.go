package main

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/routing"
)

// Through HTTP, with PSPS: a charge the primary refuses (nothing done
// there) is authorized at the secondary, and says so (psp); its capture
// goes to the secondary too.
func TestChargeFailsOverThroughHTTP(t *testing.T) {
	t.Parallel()
	primary, err := mockpsp.New(mockpsp.Faults{RejectRate: 1})
	require.NoError(t, err)
	secondary, err := mockpsp.New(mockpsp.Faults{})
	require.NoError(t, err)
	p1, p2 := httptest.NewServer(primary), httptest.NewServer(secondary)
	t.Cleanup(p1.Close)
	t.Cleanup(p2.Close)
	b := setup(t, func(m *Main) {
		m.Config.Routing = routing.Config{
			PSPs:   []routing.PSP{{Name: "primary", URL: p1.URL}, {Name: "secondary", URL: p2.URL}},
			Routes: map[string][]string{"*": {"primary", "secondary"}},
		}
	})
	status, _, body := b.do(t, "POST", "/v1/charges", map[string]string{"Idempotency-Key": "fo-1"}, []byte(visaBody))
	require.Equal(t, 201, status, "%s", body)
	var c struct{ ID, PSP, Status string }
	require.NoError(t, json.Unmarshal(body, &c))
	require.Equal(t, "secondary", c.PSP)
	require.Equal(t, "authorized", c.Status)
	require.Empty(t, primary.Authorizations())
	require.Len(t, secondary.Authorizations(), 1)

	status, _, body = b.do(t, "POST", "/v1/charges/"+c.ID+"/capture", map[string]string{"Idempotency-Key": "fo-cap"}, []byte(`{}`))
	require.Equal(t, 200, status, "%s", body)
	var caps []mockpsp.RequestEntry
	for _, r := range secondary.Requests() {
		if r.Path == "/v1/captures" {
			caps = append(caps, r)
		}
	}
	require.NotEmpty(t, caps, "captured at the PSP that holds the authorization")
}

// PSPS and PSP_URL are exclusive, and a routing mistake is one line at
// start.
func TestRoutingConfigurationRefusals(t *testing.T) {
	t.Parallel()
	for name, env := range map[string]map[string]string{
		"both":         {"PSP_URL": "embedded", "PSPS": "a=http://127.0.0.1:1"},
		"unknown name": {"PSPS": "a=http://127.0.0.1:1", "PSP_ROUTING": "*:b"},
		"no star":      {"PSPS": "a=http://127.0.0.1:1", "PSP_ROUTING": "usd:a"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env["API_ADDR"], env["MOCKPSP_ADDR"] = "127.0.0.1:0", "127.0.0.1:0"
			code, stdout, stderr := runWithin(t, 10*time.Second, []string{"serve"}, env)
			require.Equal(t, 2, code, "bad configuration: %s", stderr)
			require.Empty(t, stdout)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			require.Contains(t, stderr, "PSP")
		})
	}
}
