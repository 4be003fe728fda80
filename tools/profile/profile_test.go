package profile

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/tools/procs"
)

// The profile in short, as make test runs it: 400 charges at 2 clients on
// a throw-away cluster. Times on a shared machine mean nothing here; the
// counts do, as the docs' table reads them: each new charge inserts one
// key, head, charge and event and updates the key and the charge once (one
// PSP: its first attempt has no row), pg_waldump finds an entry per charge
// in each of their indexes (the key's two-index pair twice: its finish is
// never HOT), and every statement's share adds up.
func TestProfileShortRun(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	require.NoError(t, procs.Build(ctx, root, bin, ""))

	res, err := Run(ctx, Config{Charges: 400, Clients: 2, Warmup: 20, BinDir: bin, PprofSeconds: 1, Progress: io.Discard})
	require.NoError(t, err)
	require.Len(t, res, 1)
	r := res[0]
	require.Equal(t, 400, r.Charges)
	require.Zero(t, r.Failed)

	for _, table := range []string{"idempotency_keys", "idempotency_key_heads", "charges", "events"} {
		require.InDelta(t, 1.0, r.Tables[table].Inserts, 0.05, table)
	}
	for _, table := range []string{"idempotency_keys", "charges"} {
		require.InDelta(t, 1.0, r.Tables[table].Updates, 0.05, table)
	}
	require.Zero(t, r.Tables["charge_attempts"].Inserts+r.Tables["charge_attempts"].Updates, "a single PSP's first attempt")
	require.Zero(t, r.Tables["idempotency_keys"].HOT, "the key's finish changes indexed columns")

	require.Empty(t, r.WaldumpError)
	require.InDelta(t, 2.0, r.IndexRows["idempotency_keys_pkey"].Entries, 0.1)
	require.InDelta(t, 1.0, r.IndexRows["events_pkey"].Entries, 0.1)
	require.Greater(t, r.WAL.Bytes, 1000.0)

	var share float64
	for _, s := range r.Statements {
		share += s.SharePct
	}
	require.InDelta(t, 100, share, 0.5)
	require.Positive(t, r.CPU.Database)
	require.Empty(t, r.PprofError)
	require.NotEmpty(t, r.APITop)
}
