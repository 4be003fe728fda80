package main

// The subcommands through run, as main calls it, and Main's lifecycle:
// graceful shutdown and failed starts.

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/phases"
	"github.com/phasepay/phasepay/internal/psp/mockpsp"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// unreachableDB is a connection string nothing answers at, so that a
// command that wrongly goes ahead fails fast instead of touching a real
// database.
const unreachableDB = "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=2"

// runCmd runs the command line args with env and returns its exit code,
// stdout and stderr.
func runCmd(args []string, env map[string]string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := run(args, func(k string) string { return env[k] }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// emptyDatabase creates a database with nothing in it, dropped when the
// test ends, and returns its connection string.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	admin := testdb.Admin(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "phasepay_empty_" + hex.EncodeToString(b)

	conn, err := pgx.Connect(t.Context(), admin)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(t.Context(), "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		require.NoError(t, err)
	})

	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// requireJSONLines checks that every line of a log is a JSON object.
func requireJSONLines(t *testing.T, log string) {
	t.Helper()
	for line := range strings.Lines(log) {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &v), "log line is not JSON: %q", line)
	}
}

func TestMigrateTwiceOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	dbURL := emptyDatabase(t)
	env := map[string]string{"DATABASE_URL": dbURL}

	for i := range 2 {
		code, stdout, stderr := runCmd([]string{"migrate"}, env)
		require.Equal(t, 0, code, "migrate run %d: stderr: %s", i+1, stderr)
		require.Empty(t, stdout, "migrate run %d", i+1)
		requireJSONLines(t, stderr)
	}

	pool := testdb.Pool(t, dbURL, time.Time{})
	for _, table := range []string{"tenants", "api_keys", "idempotency_keys", "charges"} {
		var exists bool
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists))
		require.True(t, exists, "table %s", table)
	}
	var todays int
	require.NoError(t, pool.QueryRow(t.Context(), `
SELECT count(*) FROM pg_inherits
 WHERE inhparent = 'idempotency_keys'::regclass
   AND inhrelid = to_regclass('idempotency_keys_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD'))`).Scan(&todays))
	require.Equal(t, 1, todays, "today's partition exists, so the first claim can insert")

	// The migrated database serves: a key can be made on it.
	code, stdout, stderr := runCmd([]string{"keys", "create", "--tenant", "acme"}, env)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.True(t, strings.HasPrefix(stdout, "sk_"))
}

// A server without autovacuum keeps plans made on empty tables until
// someone runs ANALYZE (docs/operations.md): migrate says so, and only then.
func TestMigrateWarnsWhenAutovacuumIsOff(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)
	off, err := dbpool.AutovacuumOff(t.Context(), dbURL)
	require.NoError(t, err)
	code, _, stderr := runCmd([]string{"migrate"}, map[string]string{"DATABASE_URL": dbURL})
	require.Equal(t, 0, code, "stderr: %s", stderr)
	warned := strings.Contains(stderr, `"level":"WARN"`) && strings.Contains(stderr, "autovacuum is off")
	require.Equal(t, off, warned, "autovacuum off: %v; stderr: %s", off, stderr)
}

func TestKeysCreateStoresOnlyHash(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)
	pool := testdb.Pool(t, dbURL, time.Time{})
	env := map[string]string{"DATABASE_URL": dbURL}

	code, stdout, stderr := runCmd([]string{"keys", "create", "--tenant", "x"}, env)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Regexp(t, `\Ask_[0-9a-f]+\n\z`, stdout, "one line, the secret alone")
	secret := strings.TrimSuffix(stdout, "\n")
	require.NotContains(t, stderr, secret, "the secret must not be logged")

	rows, err := pool.Query(t.Context(), `
SELECT k.key_hash, k::text FROM api_keys k JOIN tenants t ON t.id = k.tenant_id WHERE t.name = 'x'`)
	require.NoError(t, err)
	type stored struct {
		hash []byte
		row  string
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stored, error) {
		var s stored
		return s, r.Scan(&s.hash, &s.row)
	})
	require.NoError(t, err)
	require.Len(t, got, 1)
	sum := sha256.Sum256([]byte(secret))
	require.Equal(t, sum[:], got[0].hash, "key_hash is the SHA-256 of the secret")
	require.Len(t, got[0].hash, 32)
	require.NotContains(t, got[0].row, secret)
	require.NotContains(t, got[0].row, strings.TrimPrefix(secret, "sk_"), "no part of the secret beyond a short prefix is stored")

	var anywhere int
	require.NoError(t, pool.QueryRow(t.Context(),
		`SELECT count(*) FROM api_keys k WHERE position($1 in k::text) > 0 OR position(convert_to($1, 'UTF8') in k.key_hash) > 0`,
		secret).Scan(&anywhere))
	require.Zero(t, anywhere)

	tenant, err := tenants.Authenticate(t.Context(), pool, secret)
	require.NoError(t, err)
	require.Equal(t, "x", tenant.Name)

	// A second key for the same tenant: same tenant, another secret.
	code, stdout2, stderr := runCmd([]string{"keys", "create", "--tenant", "x"}, env)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.NotEqual(t, stdout, stdout2)
	again, err := tenants.Authenticate(t.Context(), pool, strings.TrimSpace(stdout2))
	require.NoError(t, err)
	require.Equal(t, tenant, again)
}

func TestBadConfigExits2(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, variable, value string }{
		{"lease not a duration", "LEASE", "abc"},
		{"lease too short", "LEASE", "500ms"},
		{"lease negative", "LEASE", "-1s"},
		{"psp url not http", "PSP_URL", "ftp://psp.example"},
		{"psp url relative", "PSP_URL", "psp.example:8090"},
		{"one commit per phase not a boolean", "ONE_COMMIT_PER_PHASE", "maybe"},
		{"batch not a boolean", "BATCH", "sometimes"},
		{"batch max of one", "BATCH_MAX", "1"},
		{"batch lanes not a number", "BATCH_LANES", "two"},
		{"unknown pooling mode", "DATABASE_POOLER", "statement"},
		{"direct URL without a pooler", "DATABASE_DIRECT_URL", unreachableDB},
	}
	for _, tt := range tests {
		for _, args := range [][]string{nil, {"serve"}, {"migrate"}, {"keys", "create", "--tenant", "x"}} {
			t.Run(tt.name+"/"+strings.Join(append([]string{"api"}, args...), " "), func(t *testing.T) {
				t.Parallel()
				env := map[string]string{"DATABASE_URL": unreachableDB, "API_ADDR": "127.0.0.1:0", tt.variable: tt.value}
				code, stdout, stderr := runCmd(args, env)
				require.Equal(t, 2, code, "stderr: %s", stderr)
				require.Empty(t, stdout)
				require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
				require.True(t, strings.HasSuffix(stderr, "\n"))
				require.Contains(t, stderr, tt.variable, "the message names the variable")
			})
		}
	}
}

func TestUnknownSubcommandExits2(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": unreachableDB, "API_ADDR": "127.0.0.1:0"}
	for _, args := range [][]string{
		{"frobnicate"},
		{"keys"},
		{"keys", "delete"},
		{"keys", "create"},
		{"keys", "create", "--tenant", ""},
		{"keys", "create", "--tenant", "x", "extra"},
		{"keys", "create", "--bogus"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(args, env)
			require.Equal(t, 2, code, "stderr: %s", stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, "usage: api")
		})
	}
}

// TestGracefulShutdownFinishesInFlight: SIGTERM (the end of Run's context)
// while a charge waits on a slow PSP lets it finish: 201, the key done, and
// Run returns nil.
func TestGracefulShutdownFinishesInFlight(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const key = "drain-1"
	require.NoError(t, b.psp.SetFaults(mockpsp.Faults{LatencyMS: 1000}))

	inFlight := b.postAsync(t, key, visaBody)
	b.waitAuthorizing(t, 1)

	stopped := make(chan error, 1)
	go func() { stopped <- b.stop() }()

	r := await(t, inFlight)
	require.Equal(t, http.StatusCreated, r.status, "body: %s", r.body)
	c := decodeCharge(t, r.body)
	require.Equal(t, "authorized", c.Status)

	select {
	case err := <-stopped:
		require.NoError(t, err, "Run must return nil after a graceful shutdown")
	case <-time.After(ShutdownTimeout):
		require.FailNow(t, "Run did not return")
	}
	require.Equal(t, keyState{State: "done", RecoveryPoint: "done"}, b.keyState(t, key))
	require.Len(t, b.psp.Authorizations(), 1)

	// Stopped means stopped: nothing listens any more.
	_, err := b.send(t.Context(), http.MethodGet, "/healthz", nil, nil, false)
	require.Error(t, err)
}

// TestRunFailureStopsEmbeddedPSP: when Run fails to start after it started
// the embedded mock PSP (here: API_ADDR is taken), it must not leave that
// server listening behind it. A leaked listener keeps MOCKPSP_ADDR taken and
// a goroutine running in whatever process embeds Main, tests included.
func TestRunFailureStopsEmbeddedPSP(t *testing.T) {
	t.Parallel()
	dbURL := testdb.NewURL(t)

	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()

	// A free port for the mock, so that the test can tell afterwards
	// whether anything still listens on it.
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	mockAddr := probe.Addr().String()
	require.NoError(t, probe.Close())

	env := map[string]string{"DATABASE_URL": dbURL, "API_ADDR": taken.Addr().String(), "MOCKPSP_ADDR": mockAddr, "PSP_URL": PSPEmbedded}
	cfg, err := ParseEnv(func(k string) string { return env[k] })
	require.NoError(t, err)
	m := &Main{Config: cfg}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	runErr := m.Run(ctx)
	require.Error(t, runErr, "API_ADDR is taken: Run cannot start")
	require.ErrorContains(t, runErr, "listen")

	conn, dialErr := net.DialTimeout("tcp", mockAddr, time.Second)
	if dialErr == nil {
		_ = conn.Close()
	}
	require.Error(t, dialErr, "Run returned %q but the embedded mock PSP still listens on %s", runErr, mockAddr)
}

// TestGracefulShutdownFinishesRequestBeforePSPCall: a request accepted
// before SIGTERM that has not reached the PSP yet must finish too. With the
// embedded mock PSP (PSP_URL=embedded, what `make run` uses) that needs the
// mock to outlive the API's drain.
func TestGracefulShutdownFinishesRequestBeforePSPCall(t *testing.T) {
	t.Parallel()
	const key = "drain-2"
	claimed := make(chan struct{})
	resume := make(chan struct{})
	var once sync.Once
	b := setup(t, func(m *Main) {
		m.CrashHook = func(_ context.Context, at phases.CrashPoint) error {
			if at == phases.CrashAfterClaim {
				once.Do(func() {
					close(claimed)
					<-resume
				})
			}
			return nil
		}
	})

	inFlight := b.postAsync(t, key, visaBody)
	select {
	case <-claimed:
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the request never claimed its key")
	}

	stopped := make(chan error, 1)
	go func() { stopped <- b.stop() }()
	// Let shutdown begin while the request is between its claim and the
	// PSP call, then let the request go on.
	require.Eventually(t, func() bool {
		_, err := b.send(t.Context(), http.MethodGet, "/healthz", nil, nil, false)
		return err != nil
	}, 10*time.Second, 10*time.Millisecond, "the API must stop accepting connections")
	close(resume)

	r := await(t, inFlight)
	require.Equal(t, http.StatusCreated, r.status, "in flight before SIGTERM, so it must finish; body: %s", r.body)
	require.NoError(t, <-stopped)
	require.Equal(t, keyState{State: "done", RecoveryPoint: "done"}, b.keyState(t, key))
}
