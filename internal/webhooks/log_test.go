package webhooks_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// logLines decodes a JSON log, one object per line.
func logLines(t *testing.T, logs *lockedBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

// The deliverer's lines about a tenant's deliveries (an attempt that
// failed, a delivery given up) name the tenant as every other line and
// command does, by the name bin/api requests and webhooks redeliver take,
// never its database id under the same key.
func TestDeliveryLogNamesTheTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	srv, _ := receiver(t, func(int) int { return http.StatusBadGateway })
	b.endpoint(t, srv.URL)
	// Written three days ago, by the database's clock: its first attempt
	// fails and gives it up.
	past := testdb.Pool(t, b.url, time.Now().Add(-72*time.Hour-time.Minute))
	_, err := events.EnsurePartitions(context.Background(), past)
	require.NoError(t, err)
	_, err = events.Write(context.Background(), past, b.tenant, events.ChargeFailed, []byte(`{}`))
	require.NoError(t, err)
	var logs lockedBuffer
	results := b.run(t, webhooks.DelivererConfig{AllowPrivate: true, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	require.Equal(t, "failed", wait(t, results, 3*time.Second).State)

	seen := map[string]bool{}
	for _, line := range logLines(t, &logs) {
		msg, _ := line["msg"].(string)
		if msg != "webhook attempt failed" && msg != "webhook delivery given up" {
			continue
		}
		seen[msg] = true
		require.Equal(t, "t", line["tenant"], "%s: %v", msg, line)
		require.NotContains(t, line, "tenant_id", "the name was at hand")
	}
	require.True(t, seen["webhook attempt failed"])
	require.True(t, seen["webhook delivery given up"])
}
