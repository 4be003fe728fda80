package chaos_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/tools/chaos/history"
	"github.com/phasepay/phasepay/tools/procs"
)

// lostKeySQL deletes a key and the charge it made, as a promotion that
// never received their commits loses them.
const lostKeySQL = `
WITH gone AS (DELETE FROM idempotency_keys WHERE key = $1 RETURNING tenant_id)
DELETE FROM charges WHERE idempotency_key = $1`

// Proof, against a real api, that the history checker sees what the
// failover harness counts as a loss: a key answered 201, then lost as a
// failover loses it (its rows deleted), then taken by another request.
// Each answer alone is a valid answer; the key's history is not, and the
// checker names it and draws it.
func TestHistoryCheckerRejectsAKeyLostAfterItsAnswer(t *testing.T) {
	t.Parallel()
	dir, err := binaries()
	require.NoError(t, err)
	ctx := context.Background()
	dbURL := testdb.NewURL(t)
	api := filepath.Join(dir, "api")
	apiKey, err := procs.RunOnce(ctx, api, map[string]string{"DATABASE_URL": dbURL}, "keys", "create", "--tenant", "history")
	require.NoError(t, err)
	addr, err := procs.FreeAddr()
	require.NoError(t, err)
	p := procs.New("api", api, map[string]string{"DATABASE_URL": dbURL, "API_ADDR": addr, "PSP_URL": "embedded"}, "serve")
	require.NoError(t, p.Start())
	t.Cleanup(func() { p.Stop(5 * time.Second) })
	require.NoError(t, procs.WaitUp(ctx, "http://"+addr+"/healthz"), p.LogText())

	log := history.NewLog()
	log.NameTenant(apiKey, "history")
	hc := &http.Client{Transport: log.Transport(http.DefaultTransport), Timeout: 10 * time.Second}
	post := func(key, body string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/charges", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	const first, second = `{"amount":1000,"currency":"usd","payment_method":"pm_card_visa"}`, `{"amount":2000,"currency":"usd","payment_method":"pm_card_visa"}`
	status, _ := post("kept", first)
	require.Equal(t, http.StatusCreated, status)
	status, _ = post("kept", first)
	require.Equal(t, http.StatusCreated, status)
	status, body := post("kept", second)
	require.Equal(t, http.StatusUnprocessableEntity, status, body)
	status, _ = post("lost", first)
	require.Equal(t, http.StatusCreated, status)

	v, draw := history.Check(log.Ops(), 0)
	require.Equal(t, history.Accepted, v.Verdict, "%+v", v)
	require.Nil(t, draw)
	require.Equal(t, 2, v.Partitions)

	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	tag, err := conn.Exec(ctx, lostKeySQL, "lost")
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	status, body = post("lost", second)
	require.Less(t, status, 500, body)
	require.NotEqual(t, http.StatusUnprocessableEntity, status, "the key was not lost: %s", body)

	v, draw = history.Check(log.Ops(), 0)
	require.Equal(t, history.Rejected, v.Verdict, "%+v", v)
	require.Equal(t, []string{"history/lost"}, v.RejectedKeys)
	require.NotNil(t, draw)
	var b bytes.Buffer
	require.NoError(t, draw(&b))
	require.Contains(t, b.String(), "/v1/charges")
}
