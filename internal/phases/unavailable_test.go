package phases

import (
	"context"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbstate"
)

// A request whose claim cannot get a connection ends as the database being
// unavailable (503 database_unavailable). It used to panic on the claim it
// never queued, a 500 seen under make chaos while the database refused
// connections.
func TestNoConnectionIsDatabaseUnavailable(t *testing.T) {
	w := setupRaw(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nobody listens there now
	cfg, err := pgxpool.ParseConfig("postgres://postgres@" + addr + "/phasepay?sslmode=disable&connect_timeout=1")
	require.NoError(t, err)
	dead, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(dead.Close)
	e, op := w.engine(t, dead)
	_, err = Do(context.Background(), e, op, w.tenant, "no-connection", pokePath("a"), AsSent([]byte(`{"n":1}`)))
	require.Error(t, err)
	require.True(t, dbstate.Unavailable(err), "%v", err)
}
