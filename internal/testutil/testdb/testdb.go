// Package testdb gives each test a real, migrated PostgreSQL database of its
// own, cloned from a template so that creating one costs a file copy, not a
// migration run.
//
// The server is found in this order: TEST_DATABASE_URL; the server of
// DATABASE_URL (the one `make run` uses; test databases are created beside
// its database, which is never touched itself); the local server on
// 127.0.0.1:5432 (user postgres, trust auth); a PostgreSQL container started
// with testcontainers-go where a Docker daemon is configured. If none
// answers, the first test that needs a database fails with one line saying
// so, and every later test of the process fails at once with the same line,
// without trying again: a suite that quietly skips without a database proves
// nothing, and one that waits on a dead server for every test wastes
// minutes saying the same thing. (`make test` checks the server before it
// starts any test, so there the message appears once.)
//
//	go test ./internal/testutil/testdb/ -run '^TestNoServerFailsFastInOneLine$'
//	go test ./internal/testutil/testdb/ -run '^TestDatabaseURLServerIsUsedNotItsDatabase$'
//	go test ./scripts/ -run '^TestEnsurePostgresChecksTheServerOfDatabaseURL$'
//
// The template is named after a hash of the migrations, so a changed migration
// builds a new one, and is built once per server under an advisory lock, so
// test packages running in parallel (separate processes) share it safely.
//
// Why not github.com/peterldowns/pgtestdb (v0.1.1), which clones templates
// too: it would replace only buildTemplate and the CREATE/DROP DATABASE of
// NewURL (about 70 lines), and changes behaviour we rely on. It connects
// every test as a role of its own that is not a superuser, while our tests
// act on the server as its administrator (cutting a database's connections,
// handing the admin URL to subprocesses that create databases); it keeps
// the database of every failed test, which fills the server during a red run
// of `make chaos`-sized suites; it hands out a database/sql handle, where
// everything here is pgx. Finding the server (below) and preparing each
// clone's partitions stay ours either way.
package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/phasepay/phasepay/migrations"
)

const localURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// templateLockID serialises template builds across test processes.
const templateLockID = 0x70700003

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error

	templateOnce sync.Once
	templateName string
	templateErr  error
)

// New returns a pool on a fresh migrated database that is dropped when the
// test ends.
func New(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Pool(t, NewURL(t), time.Time{})
}

// Pool opens a pool on url, closed when the test ends. A non-zero clock sets
// the database clock phasepay_now() of every connection of the pool to that
// instant (see migrations/00002), so tests can put leases and partitions
// wherever they need them. The pool is small: packages run in parallel
// against one server whose max_connections they all share.
//
// Each opt may change the pool's configuration before it is opened (a
// tracer, say).
func Pool(t testing.TB, url string, clock time.Time, opts ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	cfg.MaxConns = 8
	if !clock.IsZero() {
		cfg.ConnConfig.RuntimeParams["phasepay.now"] = clock.UTC().Format(time.RFC3339Nano)
	}
	for _, opt := range opts {
		opt(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(pool.Close) // before the database is dropped: cleanups run last-in first-out
	return pool
}

// NewURL creates a fresh migrated database and returns its connection string,
// for tests that hand it to a subprocess or build their own pools.
func NewURL(t testing.TB) string {
	t.Helper()
	url, drop, err := Create(context.Background())
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	t.Cleanup(func() {
		if err := drop(); err != nil {
			t.Errorf("testdb: %v", err)
		}
	})
	return url
}

// Create creates a fresh migrated database, as NewURL does, for callers
// without a testing.TB (a runnable Example): it returns its connection
// string and the function that drops it. With no server to be found it
// fails with the same one line as NewURL.
func Create(ctx context.Context) (url string, drop func() error, err error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	serverOnce.Do(func() { serverURL, serverErr = findServer(os.Getenv, dockerConfigured) })
	if serverErr != nil {
		return "", nil, noServer(serverErr)
	}
	admin := serverURL
	tmpl, err := template(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("template: %w", err)
	}
	name := "phasepay_test_" + randomSuffix()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
		return "", nil, fmt.Errorf("create database: %w", err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			return fmt.Errorf("drop %s: %w", name, err)
		}
		return nil
	}
	url = withDatabase(admin, name)
	// The template may have been built days ago: give the clone the
	// partitions that today's inserts need, as bin/api does at start.
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", nil, errors.Join(err, drop())
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, ensurePartitionsSQL); err != nil {
		return "", nil, errors.Join(fmt.Errorf("partitions: %w", err), drop())
	}
	return url, drop, nil
}

// ensurePartitionsSQL is idempotency.EnsurePartitions's statement by the real
// clock (testdb cannot import the package whose tests use it).
// The events tables (migrations/00011) are partitioned by day too.
const ensurePartitionsSQL = `SELECT idempotency_keys_ensure_partitions((now() AT TIME ZONE 'UTC')::date - 1, 5),
       (SELECT sum(phasepay_ensure_day_partitions(t, c, (now() AT TIME ZONE 'UTC')::date - 1, 5))
          FROM (VALUES ('events', 'created_at'), ('webhook_deliveries', 'event_created_at'),
                       ('webhook_attempts', 'event_created_at')) AS p (t, c))`

// Admin returns the connection string of the server's maintenance database,
// failing the test if no server can be found. The search runs once per
// process: after a failure every caller fails at once with the same line.
func Admin(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() { serverURL, serverErr = findServer(os.Getenv, dockerConfigured) })
	if serverErr != nil {
		t.Fatalf("testdb: %v", noServer(serverErr))
	}
	return serverURL
}

// noServer is the one line that says no server answered.
func noServer(err error) error {
	return fmt.Errorf("no PostgreSQL for tests: %v. "+
		"Start one (make pg), or point TEST_DATABASE_URL or DATABASE_URL at a server that answers", err)
}

// pingTimeout bounds one try of a candidate server. A server that is up
// answers a local connection in milliseconds; one that is down refuses it at
// once, so this only matters for an address that swallows packets.
const pingTimeout = 3 * time.Second

// findServer returns the admin URL of the first candidate that answers.
// An explicit choice (TEST_DATABASE_URL, else DATABASE_URL) is the only
// candidate when it is set: tests that quietly ran against another server
// than the one named would hide the misconfiguration.
func findServer(getenv func(string) string, docker func() bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, name := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		u := getenv(name)
		if u == "" {
			continue
		}
		admin, err := adminURL(u)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		if err := ping(ctx, admin); err != nil {
			return "", fmt.Errorf("the server of %s (%s) does not answer: %w", name, hostPort(admin), oneLine(err))
		}
		return admin, nil
	}
	localErr := ping(ctx, localURL)
	if localErr == nil {
		return localURL, nil
	}
	if !docker() {
		return "", fmt.Errorf("nothing answers on %s (%w), and no Docker daemon is configured for a container", hostPort(localURL), oneLine(localErr))
	}
	u, err := startContainer(ctx)
	if err != nil {
		return "", fmt.Errorf("local server: %w; testcontainers: %w", oneLine(localErr), oneLine(err))
	}
	return u, nil
}

// adminURL returns the connection string of the maintenance database
// ("postgres") of the server u names. Test databases are created and
// dropped from there, beside the database u names, which is never used: it
// may be the one `make run` keeps its keys in.
func adminURL(u string) (string, error) {
	if _, err := pgx.ParseConfig(u); err != nil {
		return "", err
	}
	if !strings.Contains(u, "://") {
		// keyword=value form: a later keyword overrides an earlier one.
		return u + " dbname=postgres", nil
	}
	parsed, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	parsed.Path = "/postgres"
	return parsed.String(), nil
}

// hostPort names the server of a connection string for messages, without
// its password.
func hostPort(u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "?"
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// dockerConfigured reports whether a Docker daemon may be there to ask:
// DOCKER_HOST is set or the default socket exists. Without either,
// testcontainers would only spend seconds failing to find one.
func dockerConfigured() bool {
	if os.Getenv("DOCKER_HOST") != "" {
		return true
	}
	_, err := os.Stat("/var/run/docker.sock")
	return err == nil
}

// oneLine keeps an error's text on one line, so the failure reads as one.
func oneLine(err error) error {
	return errors.New(strings.Join(strings.Fields(err.Error()), " "))
}

func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}

// startContainer runs PostgreSQL 15 in Docker. It is left to testcontainers'
// own reaper (Ryuk) to remove when the test process exits, since it serves
// every test of the process.
func startContainer(ctx context.Context) (string, error) {
	c, err := testcontainers.Run(ctx, "postgres:15-alpine",
		testcontainers.WithEnv(map[string]string{"POSTGRES_HOST_AUTH_METHOD": "trust"}),
		testcontainers.WithExposedPorts("5432/tcp"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2)),
	)
	if err != nil {
		return "", err
	}
	endpoint, err := c.PortEndpoint(ctx, "5432/tcp", "")
	if err != nil {
		return "", err
	}
	return "postgres://postgres@" + endpoint + "/postgres?sslmode=disable", nil
}

// template returns the name of the migrated template database, building it
// if this server has none for the current migrations.
func template(ctx context.Context, admin string) (string, error) {
	templateOnce.Do(func() { templateName, templateErr = buildTemplate(ctx, admin) })
	return templateName, templateErr
}

func buildTemplate(ctx context.Context, admin string) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "phasepay_tmpl_" + sum[:12]

	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockID); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", templateLockID) //nolint:errcheck // the session ends right after

	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// Built under another name and renamed when complete, so a crash halfway
	// never leaves a half-migrated template that later runs would trust.
	building := name + "_building"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", err
	}
	// UpURL closes its connections before returning: a database cannot serve as
	// a template while anyone is connected to it.
	if err := migrations.UpURL(ctx, withDatabase(admin, building)); err != nil {
		return "", fmt.Errorf("migrate %s: %w", building, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+building+" RENAME TO "+name); err != nil {
		return "", err
	}
	return name, nil
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.FS, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// withDatabase returns the connection string u pointed at database db. u is
// a URL (postgres://…) or a keyword=value string, as adminURL made it.
func withDatabase(u, db string) string {
	if !strings.Contains(u, "://") {
		return u + " dbname=" + db
	}
	parsed, err := url.Parse(u)
	if err != nil {
		panic(fmt.Sprintf("testdb: connection string is not a URL: %v", err))
	}
	parsed.Path = "/" + db
	return parsed.String()
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
