// Package testdb gives each test a real, migrated PostgreSQL database of its
// own, cloned from a template so that creating one costs a file copy, not a
// migration run.
//
// The server is found in this order: TEST_DATABASE_URL; the local server on
// 127.0.0.1:5432 (user postgres, trust auth); a PostgreSQL container started
// with testcontainers-go where Docker answers. If none answers the test fails
// with a message saying so: a suite that quietly skips without a database
// proves nothing.
//
// The template is named after a hash of the migrations, so a changed migration
// builds a new one, and is built once per server under an advisory lock, so
// test packages running in parallel (separate processes) share it safely.
package testdb

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	admin := Admin(t)
	tmpl, err := template(ctx, admin)
	if err != nil {
		t.Fatalf("testdb: template: %v", err)
	}
	name := "phasepay_test_" + randomSuffix()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tmpl)); err != nil {
		t.Fatalf("testdb: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("testdb: drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", name)); err != nil {
			t.Errorf("testdb: drop %s: %v", name, err)
		}
	})
	url := withDatabase(admin, name)
	// The template may have been built days ago: give the clone the
	// partitions that today's inserts need, as bin/api does at start.
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	defer db.Close(ctx)
	if _, err := db.Exec(ctx, ensurePartitionsSQL); err != nil {
		t.Fatalf("testdb: partitions: %v", err)
	}
	return url
}

// ensurePartitionsSQL is idempotency.EnsurePartitions's statement by the real
// clock (testdb cannot import the package whose tests use it).
const ensurePartitionsSQL = `SELECT idempotency_keys_ensure_partitions((now() AT TIME ZONE 'UTC')::date - 1, 5)`

// Admin returns the connection string of the server's maintenance database,
// failing the test if no server can be found.
func Admin(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() { serverURL, serverErr = findServer() })
	if serverErr != nil {
		t.Fatalf("testdb: no PostgreSQL for tests: %v\n"+
			"Set TEST_DATABASE_URL, start the local server (pg_ctlcluster --skip-systemctl-redirect 15 main start), or run Docker.", serverErr)
	}
	return serverURL
}

func findServer() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		if err := ping(ctx, u); err != nil {
			return "", fmt.Errorf("TEST_DATABASE_URL does not answer: %w", err)
		}
		return u, nil
	}
	localErr := ping(ctx, localURL)
	if localErr == nil {
		return localURL, nil
	}
	u, err := startContainer(ctx)
	if err != nil {
		return "", fmt.Errorf("local server: %w; testcontainers: %w", localErr, err)
	}
	return u, nil
}

func ping(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
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

// withDatabase returns the connection string u pointed at database db.
// Connection strings must be URLs (postgres://…).
func withDatabase(u, db string) string {
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
