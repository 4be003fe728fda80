package main

// The keys commands (create, list, revoke), revocation across running api
// processes, and -h on every command.

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testsignal"
	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/migrations"
)

// RevocationBound is the contract's: a revoked key is refused by every
// running api process within 1 second.
const RevocationBound = time.Second

// keyID returns the id of the key whose secret is given.
func (b *testBundle) keyID(t *testing.T, secret string) string {
	t.Helper()
	sum := sha256.Sum256([]byte(secret))
	var id string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT id FROM api_keys WHERE key_hash = $1`, sum[:]).Scan(&id))
	return id
}

// authStatus sends an authenticated read with secret and returns the
// status: 404 (an unknown charge) once authenticated, 401 if refused.
func (b *testBundle) authStatus(t *testing.T, secret string) int {
	t.Helper()
	r, err := b.send(t.Context(), http.MethodGet, "/v1/charges/ch_doesnotexist", map[string]string{"Authorization": "Bearer " + secret}, nil, true)
	require.NoError(t, err)
	require.Contains(t, []int{http.StatusNotFound, http.StatusUnauthorized}, r.status, "body: %s", r.body)
	return r.status
}

// secondServer starts another Main on b's database with cfg (the first's),
// stopped when the test ends, and returns a bundle that talks to it with
// b's client and keys, and the Main.
func secondServer(t *testing.T, b *testBundle, cfg Config) (*testBundle, *Main) {
	t.Helper()
	logs := &lockedBuffer{}
	m := &Main{Config: cfg, Logger: slog.New(slog.NewJSONHandler(logs, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- m.Run(ctx) }()
	var once sync.Once
	t.Cleanup(func() {
		once.Do(cancel)
		select {
		case err := <-runErr:
			require.NoError(t, err, "second server's Run")
		case <-time.After(ShutdownTimeout + 10*time.Second):
			require.FailNow(t, "second server's Run did not return")
		}
		if t.Failed() {
			t.Logf("second server's log:\n%s", logs.String())
		}
	})
	addr := waitAddr(t, m, runErr)
	other := *b
	other.url = "http://" + addr
	return &other, m
}

// requireRefusedWithin polls secret on every server until each answers 401,
// failing if one still accepts it bound after start.
func requireRefusedWithin(t *testing.T, start time.Time, bound time.Duration, secret string, servers ...*testBundle) {
	t.Helper()
	for i, s := range servers {
		testsignal.WaitFor(t, bound-time.Since(start), func() bool { return s.authStatus(t, secret) == http.StatusUnauthorized },
			"server %d still accepts the revoked key", i)
	}
	t.Logf("refused by %d servers %s after the revocation committed", len(servers), time.Since(start))
}

// revokeCLI runs `api keys revoke id` on b's database and returns when the
// revocation has committed.
func revokeCLI(t *testing.T, b *testBundle, id string) {
	t.Helper()
	code, stdout, stderr := runCmd([]string{"keys", "revoke", id}, map[string]string{"DATABASE_URL": b.dbURL})
	require.Equal(t, 0, code, "stderr: %s", stderr)
	require.Empty(t, stdout)
	requireJSONLines(t, stderr)
}

// revokeSilently revokes id without the notification RevokeKey sends, as
// an UPDATE by hand would: a cached key keeps working until its TTL, which
// shows that a cache is warm.
func revokeSilently(t *testing.T, b *testBundle, id string) {
	t.Helper()
	tag, err := b.pool.Exec(t.Context(), `UPDATE api_keys SET revoked_at = now() WHERE id = $1`, id)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func waitCaching(t *testing.T, m *Main) {
	t.Helper()
	require.Eventually(t, func() bool { a := m.authenticator(); return a != nil && a.Caching() },
		10*time.Second, 5*time.Millisecond, "the revocation listener does not listen")
}

// TestRevokedKeyIsRefusedWithin1s: two api processes on one database, both
// with the key in their cache; `keys revoke` makes both answer 401 within
// a second, not after the cache's 30 s.
func TestRevokedKeyIsRefusedWithin1s(t *testing.T) {
	t.Parallel()
	var first *Main
	a := setup(t, func(m *Main) { first = m })
	b, second := secondServer(t, a, first.Config)
	waitCaching(t, first)
	waitCaching(t, second)
	_, control := newTenantKey(t, a.pool, "acme")

	for _, s := range []*testBundle{a, b} {
		require.Equal(t, http.StatusNotFound, s.authStatus(t, a.key))
		require.Equal(t, http.StatusNotFound, s.authStatus(t, control))
	}
	// The caches are warm: a revocation nobody announces goes unseen.
	revokeSilently(t, a, a.keyID(t, control))
	for _, s := range []*testBundle{a, b} {
		require.Equal(t, http.StatusNotFound, s.authStatus(t, control), "the control key must be cached")
	}

	revokeCLI(t, a, a.keyID(t, a.key))
	requireRefusedWithin(t, time.Now(), RevocationBound, a.key, a, b)
	require.Equal(t, http.StatusNotFound, b.authStatus(t, control), "a revocation evicts its own key only")

	// Revoking an already revoked key is harmless, and announces it again.
	revokeCLI(t, a, a.keyID(t, control))
	requireRefusedWithin(t, time.Now(), RevocationBound, control, a, b)
}

// TestRevokedKeyIsRefusedAfterListenerReconnect: the listener's connection
// is lost (its backend terminated, as in a PostgreSQL restart) and with it
// every notification sent while it is away. A key revoked then is refused
// all the same, and once the listener is back revocations evict again.
func TestRevokedKeyIsRefusedAfterListenerReconnect(t *testing.T) {
	t.Parallel()
	var m *Main
	b := setup(t, func(mm *Main) { m = mm })
	waitCaching(t, m)
	require.Equal(t, http.StatusNotFound, b.authStatus(t, b.key))
	require.Equal(t, http.StatusNotFound, b.authStatus(t, b.key))

	listenerPID := func() []int {
		var pids []int
		rows, err := b.pool.Query(t.Context(), `
SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, tenants.ListenerApplicationName)
		require.NoError(t, err)
		defer rows.Close()
		for rows.Next() {
			var pid int
			require.NoError(t, rows.Scan(&pid))
			pids = append(pids, pid)
		}
		require.NoError(t, rows.Err())
		return pids
	}
	before := listenerPID()
	require.Len(t, before, 1, "one listener connection per api process")
	var terminated bool
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT pg_terminate_backend($1)`, before[0]).Scan(&terminated))
	require.True(t, terminated)

	revokeCLI(t, b, b.keyID(t, b.key))
	requireRefusedWithin(t, time.Now(), RevocationBound, b.key, b)

	// Back, on a new connection, and evicting again.
	require.Eventually(t, func() bool {
		after := listenerPID()
		return len(after) == 1 && after[0] != before[0]
	}, 10*time.Second, 10*time.Millisecond, "the listener must reconnect")
	waitCaching(t, m)
	_, other := newTenantKey(t, b.pool, "acme")
	require.Equal(t, http.StatusNotFound, b.authStatus(t, other))
	revokeSilently(t, b, b.keyID(t, other))
	require.Equal(t, http.StatusNotFound, b.authStatus(t, other), "the cache is in use again")
	revokeCLI(t, b, b.keyID(t, other))
	requireRefusedWithin(t, time.Now(), RevocationBound, other, b)
}

// TestRevokedKeyIsRefusedAfterDatabaseRestart: PostgreSQL restarts under a
// running api whose cache holds a key; the revocation listener's session is
// gone and with it every notification sent before it is back. A key
// revoked as soon as the server is up again is refused within the bound
// all the same, and once the listener has reconnected revocations evict
// again. On a server of the test's own: the shared one is never restarted.
func TestRevokedKeyIsRefusedAfterDatabaseRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v, err := validator()
	require.NoError(t, err)
	c := pgcluster.ForTest(t, pgcluster.Config{})
	dbURL, err := c.CreateDatabase(ctx, "phasepay")
	require.NoError(t, err)
	require.NoError(t, migrations.UpURL(ctx, dbURL))
	pool := testdb.Pool(t, dbURL, time.Time{})
	_, key := newTenantKey(t, pool, "acme")
	_, other := newTenantKey(t, pool, "acme")

	// Any http URL: these requests never reach a PSP.
	env := map[string]string{"DATABASE_URL": dbURL, "API_ADDR": "127.0.0.1:0", "PSP_URL": "http://127.0.0.1:1"}
	cfg, err := ParseEnv(func(k string) string { return env[k] })
	require.NoError(t, err)
	client := &http.Client{Transport: &http.Transport{}, Timeout: time.Minute}
	t.Cleanup(client.CloseIdleConnections)
	b, m := secondServer(t, &testBundle{dbURL: dbURL, pool: pool, client: client, validator: v}, cfg)
	waitCaching(t, m)
	require.Equal(t, http.StatusNotFound, b.authStatus(t, key))

	require.NoError(t, c.Restart(ctx, time.Second))
	revokeCLI(t, b, b.keyID(t, key))
	start := time.Now()
	testsignal.WaitFor(t, RevocationBound, func() bool {
		r, err := b.send(t.Context(), http.MethodGet, "/v1/charges/ch_doesnotexist", map[string]string{"Authorization": "Bearer " + key}, nil, false)
		require.NoError(t, err)
		require.NotEqual(t, http.StatusNotFound, r.status, "the revoked key is accepted after the restart")
		return r.status == http.StatusUnauthorized
	}, "the revoked key is neither refused nor accepted")
	t.Logf("refused %s after the revocation committed", time.Since(start))

	waitCaching(t, m)
	require.Equal(t, http.StatusNotFound, b.authStatus(t, other))
	revokeSilently(t, b, b.keyID(t, other))
	require.Equal(t, http.StatusNotFound, b.authStatus(t, other), "the cache is in use again")
	revokeCLI(t, b, b.keyID(t, other))
	requireRefusedWithin(t, time.Now(), RevocationBound, other, b)
}

// keyLine is one line of `keys list`.
var keyLine = regexp.MustCompile(`\A(key_[0-9a-f]+) +(\S{1,8}) +(\S+) +(active|revoked (\S+))\z`)

func TestKeysList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := map[string]string{"DATABASE_URL": b.dbURL}
	code, secret, stderr := runCmd([]string{"keys", "create", "--tenant", "acme"}, env)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	secret = strings.TrimSpace(secret)
	revoked := b.keyID(t, b.key)
	revokeCLI(t, b, revoked)

	code, stdout, stderr := runCmd([]string{"keys", "list", "--tenant", "acme"}, env)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 2, "one line per key: %q", stdout)
	newest := keyLine.FindStringSubmatch(lines[0])
	require.NotNil(t, newest, "line %q", lines[0])
	require.Equal(t, b.keyID(t, secret), newest[1], "newest first")
	require.True(t, strings.HasPrefix(secret, newest[2]), "the prefix is the secret's")
	require.Equal(t, "active", newest[4])
	_, err := time.Parse(time.RFC3339, newest[3])
	require.NoError(t, err)
	oldest := keyLine.FindStringSubmatch(lines[1])
	require.NotNil(t, oldest, "line %q", lines[1])
	require.Equal(t, revoked, oldest[1])
	_, err = time.Parse(time.RFC3339, oldest[5])
	require.NoError(t, err, "revoked with its time")
	for _, s := range []string{secret, b.key} {
		require.NotContains(t, stdout, s[:len("sk_")+9], "never more of a secret than its prefix")
	}

	code, stdout, stderr = runCmd([]string{"keys", "list", "--tenant", "nobody"}, env)
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	require.Equal(t, "api keys list: no tenant is named \"nobody\"\n", stderr)
}

func TestKeysListJSON(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := map[string]string{"DATABASE_URL": b.dbURL}
	_, second := newTenantKey(t, b.pool, "acme")
	revokeCLI(t, b, b.keyID(t, b.key))

	code, stdout, stderr := runCmd([]string{"keys", "list", "--tenant", "acme", "--json"}, env)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 2, "one JSON object per line: %q", stdout)
	for i, line := range lines {
		var obj map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &obj), line)
		require.ElementsMatch(t, []string{"id", "prefix", "created_at", "revoked_at"}, mapKeys(obj), line)
		secret := []string{second, b.key}[i]
		require.Equal(t, b.keyID(t, secret), obj["id"])
		prefix, ok := obj["prefix"].(string)
		require.True(t, ok)
		require.LessOrEqual(t, len(prefix), 8)
		require.True(t, strings.HasPrefix(secret, prefix))
		created, ok := obj["created_at"].(string)
		require.True(t, ok)
		_, err := time.Parse(time.RFC3339Nano, created)
		require.NoError(t, err)
		require.NotContains(t, line, secret[:len("sk_")+9])
	}
	var first, last map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &last))
	require.Nil(t, first["revoked_at"], "null when not revoked")
	revokedAt, ok := last["revoked_at"].(string)
	require.True(t, ok, "revoked_at: %v", last["revoked_at"])
	_, err := time.Parse(time.RFC3339Nano, revokedAt)
	require.NoError(t, err)
}

func mapKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestKeysRevoke(t *testing.T) {
	t.Parallel()
	b := setup(t)
	env := map[string]string{"DATABASE_URL": b.dbURL}

	code, stdout, stderr := runCmd([]string{"keys", "revoke", "key_doesnotexist"}, env)
	require.Equal(t, 1, code)
	require.Empty(t, stdout)
	require.Equal(t, "api keys revoke: no API key has id \"key_doesnotexist\"\n", stderr, "one line")

	id := b.keyID(t, b.key)
	for range 2 { // twice: harmless
		revokeCLI(t, b, id)
		require.Equal(t, http.StatusUnauthorized, b.authStatus(t, b.key))
	}
	var revokedAt time.Time
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT revoked_at FROM api_keys WHERE id = $1`, id).Scan(&revokedAt))

	for _, args := range [][]string{{"keys", "revoke"}, {"keys", "revoke", id, "extra"}, {"keys", "list"}, {"keys", "list", "--tenant", "acme", "extra"}} {
		code, stdout, stderr := runCmd(args, env)
		require.Equal(t, 2, code, "%q: stderr: %s", args, stderr)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "usage: api keys "+args[1])
	}
}

// TestKeyPrefixIsAtMost8Characters: what is stored and listed of a secret
// is at most 8 characters.
func TestKeyPrefixIsAtMost8Characters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var prefix string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT prefix FROM api_keys WHERE id = $1`, b.keyID(t, b.key)).Scan(&prefix))
	require.LessOrEqual(t, len(prefix), 8)
	require.True(t, strings.HasPrefix(b.key, prefix))
}

// TestEveryCommandAnswersHelp: -h and --help print usage on stdout and exit
// 0 without starting anything: not even the configuration is read (it is
// invalid here, and the database unreachable).
func TestEveryCommandAnswersHelp(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": unreachableDB, "API_ADDR": "127.0.0.1:0", "LEASE": "not a duration", "PSP_URL": ""}
	lines := [][]string{{}}
	var walk func(prefix []string, cs []*command)
	walk = func(prefix []string, cs []*command) {
		for _, c := range cs {
			path := append(append([]string{}, prefix...), c.name)
			lines = append(lines, path)
			walk(path, c.sub)
		}
	}
	walk(nil, commands)
	require.Contains(t, lines, []string{"keys", "revoke"})
	for _, path := range lines {
		for _, help := range []string{"-h", "--help"} {
			args := append(append([]string{}, path...), help)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				code, stdout, stderr := runBounded(t, args, env)
				require.Equal(t, 0, code, "stderr: %s", stderr)
				require.Empty(t, stderr)
				require.True(t, strings.HasPrefix(stdout, "usage:"), "stdout: %s", stdout)
				require.Contains(t, stdout, strings.TrimSpace("api "+strings.Join(path, " ")))
			})
		}
	}

	// The list of commands names every command, with its arguments.
	code, stdout, _ := runCmd([]string{"-h"}, env)
	require.Equal(t, 0, code)
	for _, c := range []string{"serve", "migrate", "keys create --tenant NAME", "keys list --tenant NAME [--json]", "keys revoke ID"} {
		require.Contains(t, stdout, "api "+c)
	}
	// -h after arguments still only helps.
	code, stdout, _ = runBounded(t, []string{"keys", "revoke", "key_x", "-h"}, env)
	require.Equal(t, 0, code)
	require.True(t, strings.HasPrefix(stdout, "usage: api keys revoke ID\n"), stdout)
}

// runBounded is runCmd that fails the test unless the command returns
// within 10 s: help must never start a server.
func runBounded(t *testing.T, args []string, env map[string]string) (int, string, string) {
	t.Helper()
	type result struct {
		code           int
		stdout, stderr string
	}
	done := make(chan result, 1)
	go func() {
		code, stdout, stderr := runCmd(args, env)
		done <- result{code, stdout, stderr}
	}()
	select {
	case r := <-done:
		return r.code, r.stdout, r.stderr
	case <-time.After(10 * time.Second):
		require.FailNow(t, fmt.Sprintf("%q did not return: it started something", args))
		return 0, "", ""
	}
}
