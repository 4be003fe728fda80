package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Capture, void and refund through the HTTP API: each answer, its replay,
// and what another tenant sees.

func TestCaptureThenRefund(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	id := b.authorize(t, "auth")

	capPath, capBody := "/v1/charges/"+id+"/capture", `{"amount":600}`
	r := b.do(t, http.MethodPost, capPath, "cap", capBody)
	c := requireStatus(t, r, http.StatusOK, "")
	require.Equal(t, object{ID: id, Object: "charge", Status: "captured", Amount: 1000, AmountCaptured: 600}, c)
	require.Empty(t, r.header.Get("Idempotent-Replayed"))
	b.requireReplay(t, r, http.MethodPost, capPath, "cap", capBody)
	require.Len(t, b.mock.Captures(), 1, "a replay does not capture again")

	refBody := `{"charge":"` + id + `","amount":200}`
	r = b.do(t, http.MethodPost, "/v1/refunds", "ref", refBody)
	ref := requireStatus(t, r, http.StatusCreated, "")
	require.Equal(t, object{ID: ref.ID, Object: "refund", Status: "succeeded", Amount: 200, Charge: id}, ref)
	b.requireReplay(t, r, http.MethodPost, "/v1/refunds", "ref", refBody)

	got := requireStatus(t, b.do(t, http.MethodGet, "/v1/refunds/"+ref.ID, "", ""), http.StatusOK, "")
	require.Equal(t, ref, got)
	ch := requireStatus(t, b.do(t, http.MethodGet, "/v1/charges/"+id, "", ""), http.StatusOK, "")
	require.Equal(t, int64(200), ch.AmountRefunded)

	// Without an amount: all that is left.
	rest := requireStatus(t, b.do(t, http.MethodPost, "/v1/refunds", "rest", `{"charge":"`+id+`"}`), http.StatusCreated, "")
	require.Equal(t, int64(400), rest.Amount)
	ch = requireStatus(t, b.do(t, http.MethodGet, "/v1/charges/"+id, "", ""), http.StatusOK, "")
	require.Equal(t, int64(600), ch.AmountRefunded)
}

func TestVoid(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	id := b.authorize(t, "auth")
	path := "/v1/charges/" + id + "/void"
	r := b.do(t, http.MethodPost, path, "void", `{}`)
	require.Equal(t, "voided", requireStatus(t, r, http.StatusOK, "").Status)
	b.requireReplay(t, r, http.MethodPost, path, "void", `{}`)
	require.Len(t, b.mock.Voids(), 1)
}

// Each request the charge's state does not allow answers its 400, stored:
// the same key replays it even after the charge's state has changed.
func TestRefusalsAreStoredForReplay(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	authorized := b.authorize(t, "a1")
	captured := b.authorize(t, "a2")
	b.capture(t, captured)
	voided := b.authorize(t, "a3")
	requireStatus(t, b.do(t, http.MethodPost, "/v1/charges/"+voided+"/void", "v3", `{}`), http.StatusOK, "")

	for _, tc := range []struct {
		name, path, body, code string
	}{
		{"capture over the authorized amount", "/v1/charges/" + authorized + "/capture", `{"amount":1001}`, "amount_too_large"},
		{"capture of a captured charge", "/v1/charges/" + captured + "/capture", `{}`, "charge_not_capturable"},
		{"capture of a voided charge", "/v1/charges/" + voided + "/capture", `{}`, "charge_not_capturable"},
		{"void of a captured charge", "/v1/charges/" + captured + "/void", `{}`, "charge_not_voidable"},
		{"void of a voided charge", "/v1/charges/" + voided + "/void", `{}`, "charge_not_voidable"},
		{"refund of an uncaptured charge", "/v1/refunds", `{"charge":"` + authorized + `"}`, "charge_not_refundable"},
		{"refund of a voided charge", "/v1/refunds", `{"charge":"` + voided + `"}`, "charge_not_refundable"},
		{"refund over the captured amount", "/v1/refunds", `{"charge":"` + captured + `","amount":1001}`, "amount_too_large"},
	} {
		key := "refused-" + strings.ReplaceAll(tc.name, " ", "-")
		r := b.do(t, http.MethodPost, tc.path, key, tc.body)
		require.NotEmpty(t, requireStatus(t, r, http.StatusBadRequest, tc.code).Charge, "a refusal names its charge")
		b.requireReplay(t, r, http.MethodPost, tc.path, key, tc.body)
	}

	// A refusal stays the answer of its key once the state would allow the
	// request: the charge is captured after the refusal, the replay is
	// still the 400.
	path, body := "/v1/refunds", `{"charge":"`+authorized+`","amount":100}`
	first := b.do(t, http.MethodPost, path, "early-refund", body)
	requireStatus(t, first, http.StatusBadRequest, "charge_not_refundable")
	b.capture(t, authorized)
	b.requireReplay(t, first, http.MethodPost, path, "early-refund", body)
	require.Empty(t, b.mock.Refunds())
}

// Another tenant's charge or refund is not found, exactly as an unknown
// id, and nothing is stored: the same key then works on the tenant's own.
func TestOtherTenantsObjectsAreNotFound(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	id := b.authorize(t, "auth")
	b.capture(t, id)
	ref := requireStatus(t, b.do(t, http.MethodPost, "/v1/refunds", "ref", `{"charge":"`+id+`","amount":100}`), http.StatusCreated, "")

	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/charges/" + id + "/capture", `{}`},
		{http.MethodPost, "/v1/charges/" + id + "/void", `{}`},
		{http.MethodPost, "/v1/refunds", `{"charge":"` + id + `"}`},
		{http.MethodGet, "/v1/refunds/" + ref.ID, ""},
		{http.MethodGet, "/v1/refunds?charge=" + id, ""},
		{http.MethodGet, "/v1/charges/" + id, ""},
		{http.MethodPost, "/v1/charges/ch_unknown/capture", `{}`},
		{http.MethodGet, "/v1/refunds/re_unknown", ""},
	} {
		key := ""
		if tc.method == http.MethodPost {
			key = "k"
		}
		requireStatus(t, b.asOther(t, tc.method, tc.path, key, tc.body), http.StatusNotFound, "not_found")
	}
	var keys int
	require.NoError(t, b.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM idempotency_keys WHERE tenant_id <> $1`, b.tenant.ID).Scan(&keys))
	require.Zero(t, keys, "a 404 stores no key")
	require.Len(t, b.mock.Refunds(), 1)
	require.Len(t, b.mock.Captures(), 1)
}

// A capture or void of a charge whose authorization has no outcome yet
// answers 409 charge_pending with Retry-After and stores nothing: the same
// key works once the authorization is known.
func TestCaptureOfPendingChargeIs409(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	ctx := context.Background()
	const id = "ch_pending0000000000000000"
	_, err := b.pool.Exec(ctx, `INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at,
	    amount, currency, payment_method, status) VALUES ($1, $2, 'unfinished', now(), 1000, 'usd', 'pm_card_visa', 'pending')`,
		b.tenant.ID, id)
	require.NoError(t, err)

	for _, op := range []string{"capture", "void"} {
		r := b.do(t, http.MethodPost, "/v1/charges/"+id+"/"+op, op, `{}`)
		requireStatus(t, r, http.StatusConflict, "charge_pending")
		require.NotEmpty(t, r.header.Get("Retry-After"))
		require.Empty(t, r.header.Get("Idempotent-Replayed"))
	}
	// The authorization's outcome becomes known (as a resumed request
	// would record it): the same key now captures.
	_, err = b.pool.Exec(ctx, `UPDATE charges SET status = 'authorized', psp_reference = 'auth_x' WHERE id = $1`, id)
	require.NoError(t, err)
	r := b.do(t, http.MethodPost, "/v1/charges/"+id+"/capture", "capture", `{}`)
	require.NotEqual(t, http.StatusConflict, r.status, "%s", r.body)
	require.Empty(t, r.header.Get("Idempotent-Replayed"), "the 409 was not stored")
}

// Invalid bodies and keys answer 400 before any key is claimed, with the
// invalid field named, exactly as for POST /v1/charges; the same key then
// serves the corrected request.
func TestInvalidOperationRequestsStoreNothing(t *testing.T) {
	t.Parallel()
	b := setupAPI(t, time.Time{})
	id := b.authorize(t, "auth")
	capture, void := "/v1/charges/"+id+"/capture", "/v1/charges/"+id+"/void"
	for _, tc := range []struct{ name, path, body, field string }{
		{"zero amount", capture, `{"amount":0}`, "amount"},
		{"negative amount", capture, `{"amount":-5}`, "amount"},
		{"amount past 2^53-1", capture, `{"amount":9007199254740992}`, "amount"},
		{"amount as a string", capture, `{"amount":"5"}`, "amount"},
		{"wrong case", capture, `{"Amount":5}`, "Amount"},
		{"unknown member", void, `{"reason":"x"}`, "reason"},
		{"not an object", void, `[]`, ""},
		{"trailing data", void, `{} {}`, ""},
		{"refund without charge", "/v1/refunds", `{"amount":5}`, "charge"},
		{"refund of a malformed charge", "/v1/refunds", `{"charge":"nope"}`, "charge"},
		{"refund of zero", "/v1/refunds", `{"charge":"` + id + `","amount":0}`, "amount"},
		{"repeated member", "/v1/refunds", `{"charge":"` + id + `","charge":"` + id + `"}`, "charge"},
	} {
		r := b.do(t, http.MethodPost, tc.path, "fixme", tc.body)
		requireStatus(t, r, http.StatusBadRequest, "invalid_request")
		if tc.field != "" {
			require.Contains(t, string(r.body), `"field":"`+tc.field+`"`, tc.name)
		}
	}
	requireStatus(t, b.do(t, http.MethodPost, capture, "", `{}`), http.StatusBadRequest, "idempotency_key_missing")
	// Nothing was stored under "fixme": it serves the corrected request.
	requireStatus(t, b.do(t, http.MethodPost, capture, "fixme", `{"amount":5}`), http.StatusOK, "")
	// The fingerprint covers the path: the key of a capture on a void is a
	// different request.
	requireStatus(t, b.do(t, http.MethodPost, void, "fixme", `{}`), http.StatusUnprocessableEntity, "idempotency_key_mismatch")
}
