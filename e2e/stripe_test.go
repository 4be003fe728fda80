package e2e_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/phasepay/phasepay/internal/testutil/stripemock"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// TestStackOnStripeMock runs api and reaper processes on a Stripe PSP,
// Stripe's own stripe-mock (PSPS=stripe=stripe+http://127.0.0.1:PORT), and
// drives a charge, its capture and a refund, and a second charge's void
// through it: each answers definitively, the charges naming psp "stripe"
// and a PaymentIntent (pi_…) as their reference. Stripe's webhook for the
// settled charge is verified and acknowledged; one that does not verify
// is refused.
func TestStackOnStripeMock(t *testing.T) {
	t.Parallel()
	m := stripemock.ForTest(t, stripemock.Options{Authorizing: true})
	const secret = "whsec_e2e_stripe"
	dbURL := testdb.NewURL(t)
	env := map[string]string{"DATABASE_URL": dbURL, "PSPS": "stripe=stripe+" + m.URL,
		"PSP_STRIPE_API_KEY": "sk_test_e2e", "PSP_STRIPE_WEBHOOK_SECRET": secret, "LEASE": "2s", "REAPER_INTERVAL": "200ms"}
	apiKey := runCmd(t, "api", env, "keys", "create", "--tenant", "e2e-stripe")
	addr := freeAddr(t)
	start(t, "api", withEnv(env, "API_ADDR", addr), "serve")
	start(t, "reaper", env)
	base := "http://" + addr
	waitHealthy(t, base)
	c := &poolerCluster{cluster: &cluster{t: t, apiKey: apiKey}}

	var charge struct {
		ID, Status, PSP string
		PSPReference    string `json:"psp_reference"`
		AmountCaptured  int64  `json:"amount_captured"`
	}
	r := c.call(base, http.MethodPost, "/v1/charges", "stripe-charge-1", visa)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	require.NoError(t, json.Unmarshal(r.body, &charge))
	require.Equal(t, "authorized", charge.Status)
	require.Equal(t, "stripe", charge.PSP)
	require.True(t, strings.HasPrefix(charge.PSPReference, "pi_"), charge.PSPReference)
	first := charge.ID

	r = c.call(base, http.MethodPost, "/v1/charges/"+first+"/capture", "stripe-capture-1", `{"amount":600}`)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.NoError(t, json.Unmarshal(r.body, &charge))
	require.Equal(t, "captured", charge.Status)
	require.Equal(t, int64(600), charge.AmountCaptured)

	r = c.call(base, http.MethodPost, "/v1/refunds", "stripe-refund-1", fmt.Sprintf(`{"charge":%q,"amount":300}`, first))
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	var refund struct{ Status, PSPReference string }
	require.NoError(t, json.Unmarshal(r.body, &refund))
	require.Equal(t, "succeeded", refund.Status)

	r = c.call(base, http.MethodPost, "/v1/charges", "stripe-charge-2", visa)
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	require.NoError(t, json.Unmarshal(r.body, &charge))
	r = c.call(base, http.MethodPost, "/v1/charges/"+charge.ID+"/void", "stripe-void-2", `{}`)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	require.NoError(t, json.Unmarshal(r.body, &charge))
	require.Equal(t, "voided", charge.Status)
	require.Equal(t, "stripe", charge.PSP)

	// Stripe's webhook for the first charge: verified, acknowledged (the
	// charge is settled: nothing to do). Unsigned or wrongly signed: 400.
	var tenant int64
	require.NoError(t, testdb.Pool(t, dbURL, time.Time{}).QueryRow(t.Context(), `SELECT tenant_id FROM charges WHERE id = $1`, first).Scan(&tenant))
	event := []byte(fmt.Sprintf(`{"id":"evt_e2e","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_e2e","object":"payment_intent","metadata":{"phasepay_charge":%q,"phasepay_tenant":"%d"}}}}`, first, tenant))
	for sig, want := range map[string]int{
		fmt.Sprintf("t=%d,v1=%x", time.Now().Unix(), webhook.ComputeSignature(time.Now(), event, secret)):        http.StatusOK,
		fmt.Sprintf("t=%d,v1=%x", time.Now().Unix(), webhook.ComputeSignature(time.Now(), event, "whsec_other")): http.StatusBadRequest,
	} {
		req, err := http.NewRequest(http.MethodPost, base+"/v1/psp_webhooks/stripe", strings.NewReader(string(event)))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json; charset=utf-8")
		req.Header.Set("Stripe-Signature", sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode)
	}
}

// TestStripePSPWithoutKeyRefusesToStart: api serve and the reaper refuse a
// Stripe PSP without its secret key, with one line naming the variable.
func TestStripePSPWithoutKeyRefusesToStart(t *testing.T) {
	t.Parallel()
	for _, bin := range []string{"api", "reaper"} {
		cmd := exec.Command(filepath.Join(binDir, bin))
		if bin == "api" {
			cmd.Args = append(cmd.Args, "serve")
		}
		cmd.Env = []string{"PATH=/usr/bin:/bin", "DATABASE_URL=postgres://127.0.0.1:1/none", "PSPS=stripe=stripe+https://api.stripe.com"}
		out, err := cmd.CombinedOutput()
		require.Error(t, err, "%s started without PSP_STRIPE_API_KEY", bin)
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		require.Len(t, lines, 1, "%s: one line: %s", bin, out)
		require.Contains(t, lines[0], "PSP_STRIPE_API_KEY", bin)
	}
}

func withEnv(env map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for key, val := range env {
		out[key] = val
	}
	return out
}
