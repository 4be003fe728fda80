package reaper_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/reaper"
	"github.com/phasepay/phasepay/internal/testutil/chargestest"
)

// The reaper's warning that requests need an operator is logged when their
// count changes, and once a minute (reaper.WarnRepeat) while it stays the
// same, with the count; its end is logged once. Time is moved on the
// reaper's clock (Config.Clock), not slept: a pass a second apart logs
// nothing new.
func TestNeedsAttentionWarningOncePerChangeOrMinute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	for _, key := range []string{"na1", "na2"} {
		abandon(t, b, key, false, phases.CrashAfterClaim)
	}
	giveUp := func(key string) {
		_, err := b.Pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'needs_attention', locked_until = NULL WHERE key = $1`, key)
		require.NoError(t, err)
	}
	giveUp("na1")

	now := time.Date(2026, 12, 4, 21, 0, 0, 0, time.UTC)
	var logs bytes.Buffer
	r, err := reaper.New(b.Pool, b.Keys, chargestest.NewService(t, b.Pool, b.Keys, b.PSP, phases.Config{}),
		reaper.Config{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), Clock: func() time.Time { return now }})
	require.NoError(t, err)

	// pass makes one pass d after the last and returns what it logged of
	// the warning: the counts of the WARN lines, and whether its end was
	// logged.
	pass := func(d time.Duration) (counts []float64, ended bool) {
		t.Helper()
		now = now.Add(d)
		logs.Reset()
		_, err := r.RunOnce(ctx)
		require.NoError(t, err)
		for _, line := range bytes.Split(bytes.TrimSpace(logs.Bytes()), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			var m map[string]any
			require.NoError(t, json.Unmarshal(line, &m))
			switch m["msg"] {
			case "requests need an operator (bin/api requests list --state needs_attention)":
				require.Equal(t, "WARN", m["level"])
				counts = append(counts, m["count"].(float64))
			case "no request needs an operator any more":
				require.Equal(t, "INFO", m["level"])
				ended = true
			}
		}
		return counts, ended
	}

	counts, _ := pass(0)
	require.Equal(t, []float64{1}, counts, "the first pass that sees it")
	for range 58 {
		counts, ended := pass(time.Second)
		require.Empty(t, counts, "the same count within the minute: %s", logs.String())
		require.False(t, ended)
	}
	counts, _ = pass(2 * time.Second)
	require.Equal(t, []float64{1}, counts, "repeated once the minute is over")
	counts, _ = pass(time.Second)
	require.Empty(t, counts)

	giveUp("na2")
	counts, _ = pass(time.Second)
	require.Equal(t, []float64{2}, counts, "a new count is logged at once")
	counts, _ = pass(time.Second)
	require.Empty(t, counts)

	// Back to unfinished, held (as an operator's retry leaves them while a
	// worker attempts them): no longer waiting for an operator.
	_, err = b.Pool.Exec(ctx, `UPDATE idempotency_keys SET state = 'started', locked_until = phasepay_now() + interval '1 hour'
 WHERE key IN ('na1', 'na2')`)
	require.NoError(t, err)
	counts, ended := pass(time.Second)
	require.Empty(t, counts)
	require.True(t, ended, "its end is logged once")
	_, ended = pass(2 * reaper.WarnRepeat)
	require.False(t, ended)
}
