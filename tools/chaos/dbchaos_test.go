package chaos

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An api that stays up but never becomes ready again after the database
// is back has not recovered by itself, and the harness says which one.
func TestAPIThatStaysUnreadyAfterDatabaseRestartIsReported(t *testing.T) {
	t.Parallel()
	var ready atomic.Bool
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ready.Load() {
			w.WriteHeader(http.StatusOK)
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(api.Close)
	cfg := &Config{RecoverWithin: 300 * time.Millisecond}
	d := &dbChaos{cfg: cfg, bases: []string{api.URL}, dbURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}

	took, missing, _ := d.awaitRecovery(context.Background(), time.Now())
	require.Len(t, missing, 1)
	require.Contains(t, missing[0], "api-0 /readyz: 503")
	require.GreaterOrEqual(t, took, cfg.RecoverWithin)

	ready.Store(true)
	took, missing, _ = d.awaitRecovery(context.Background(), time.Now())
	require.Empty(t, missing)
	require.Less(t, took, cfg.RecoverWithin)
}

// A reaper that never connects again after the restart has not recovered;
// the harness cannot see it connect (here: no database at all), so says so.
func TestReaperThatNeverReconnectsIsReported(t *testing.T) {
	t.Parallel()
	d := &dbChaos{cfg: &Config{RecoverWithin: 200 * time.Millisecond}, reapers: []string{"reaper-0"},
		dbURL: "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"}
	_, missing, _ := d.awaitRecovery(context.Background(), time.Now())
	require.Len(t, missing, 1)
	require.Contains(t, missing[0], "reaper-0 has no connection to the database")
}
