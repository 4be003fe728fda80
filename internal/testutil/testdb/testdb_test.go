package testdb

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func noDocker() bool { return false }

// closedAddr returns a loopback address on which nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// With PostgreSQL down, a test run must say so at once and in one line,
// not after minutes of per-test time-outs.
func TestNoServerFailsFastInOneLine(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for name, vars := range map[string]map[string]string{
		"DATABASE_URL":      {"DATABASE_URL": "postgres://postgres@" + addr + "/phasepay?sslmode=disable"},
		"TEST_DATABASE_URL": {"TEST_DATABASE_URL": "postgres://postgres@" + addr + "/x?sslmode=disable"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			_, err := findServer(env(vars), noDocker)
			require.Error(t, err)
			require.Less(t, time.Since(start), pingTimeout, "a refused connection must fail without waiting")
			require.NotContains(t, err.Error(), "\n")
			require.Contains(t, err.Error(), name)
			require.Contains(t, err.Error(), addr)
		})
	}
}

// The server DATABASE_URL names is the one tests use, through its
// maintenance database: the phasepay database itself is never touched.
func TestDatabaseURLServerIsUsedNotItsDatabase(t *testing.T) {
	t.Parallel()
	got, err := findServer(env(map[string]string{
		"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/phasepay?sslmode=disable",
	}), noDocker)
	require.NoError(t, err)
	require.Equal(t, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", got)
}

// TEST_DATABASE_URL, when set, is the only candidate: a named server that
// does not answer is an error, never a silent fall-back to another one.
func TestTestDatabaseURLWinsOverDatabaseURL(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	_, err := findServer(env(map[string]string{
		"TEST_DATABASE_URL": "postgres://postgres@" + addr + "/postgres?sslmode=disable",
		"DATABASE_URL":      "postgres://postgres@127.0.0.1:5432/phasepay?sslmode=disable",
	}), noDocker)
	require.ErrorContains(t, err, "TEST_DATABASE_URL")
}

func TestAdminURL(t *testing.T) {
	t.Parallel()
	got, err := adminURL("postgres://u:secret@db.example:6543/phasepay?sslmode=require&application_name=x")
	require.NoError(t, err)
	require.Equal(t, "postgres://u:secret@db.example:6543/postgres?sslmode=require&application_name=x", got)

	got, err = adminURL("host=127.0.0.1 port=5432 user=postgres dbname=phasepay sslmode=disable")
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(got, " dbname=postgres"), got)
	cfg, err := pgx.ParseConfig(got)
	require.NoError(t, err)
	require.Equal(t, "postgres", cfg.Database, "a later keyword overrides an earlier one")
	require.Equal(t, "127.0.0.1:5432", hostPort(got))
	require.Contains(t, withDatabase(got, "phasepay_test_x"), "dbname=phasepay_test_x")

	_, err = adminURL("postgres://[::1")
	require.Error(t, err)
}
