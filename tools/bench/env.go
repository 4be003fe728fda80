package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/dbpool"
)

type env struct {
	cfg Config
	// dbName is the run's own database (benchDB), dbURL its URL.
	dbName string
	dbURL  string
	// partsURL is a copy of the freshly migrated database, for the
	// claim-by-partitions step, which drops and creates partitions.
	partsURL string
	admin    *pgx.Conn
	pool     *pgxpool.Pool
	// claims is a pool on dbURL opened like the api's (apiPool), for the
	// claims timed directly (growth, drop impact).
	claims *pgxpool.Pool
	apiKey string
	hc     *http.Client
	// analyzer stands in for autovacuum where the server has none
	// (analyze.go).
	analyzer *analyzer
	log      func(format string, args ...any)
}

func (e *env) setup(ctx context.Context) error {
	var err error
	if e.admin, err = pgx.Connect(ctx, e.cfg.AdminURL); err != nil {
		return fmt.Errorf("admin database: %w", err)
	}
	name := benchDB()
	e.dbName = name
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	u, err := url.Parse(e.cfg.AdminURL)
	if err != nil {
		return err
	}
	u.Path = "/" + name
	e.dbURL = u.String()
	if out, err := e.run(ctx, "api", nil, "migrate"); err != nil {
		return fmt.Errorf("migrate: %w: %s", err, out)
	}
	out, err := e.run(ctx, "api", nil, "keys", "create", "--tenant", "bench")
	if err != nil {
		return fmt.Errorf("keys create: %w: %s", err, out)
	}
	e.apiKey = strings.TrimSpace(out)
	// Nothing is connected to the new database yet: it can be a template.
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.partsDB()+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+e.partsDB()+" TEMPLATE "+name); err != nil {
		return err
	}
	u.Path = "/" + e.partsDB()
	e.partsURL = u.String()
	if err := e.makeArmTemplate(ctx); err != nil {
		return fmt.Errorf("arm template: %w", err)
	}
	if e.pool, err = pgxpool.New(ctx, e.dbURL); err != nil {
		return err
	}
	on, err := autovacuumOn(ctx, e.pool)
	if err != nil {
		return fmt.Errorf("autovacuum setting: %w", err)
	}
	e.analyzer = &analyzer{pool: e.pool, emulate: !on}
	e.claims, err = apiPool(ctx, e.dbURL)
	return err
}

// apiPool opens a pool on url the way the api opens its own
// (dbpool.ConfigurePool: its timeouts and its plan cache mode, which
// decides whether a claim's statements are planned at every execution),
// so that the claims the benchmark times directly cost what the api's do.
// Seeding and other set-up use a plain pool: a 10 M-key seed runs for
// minutes, past the api's statement_timeout.
func apiPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	dbpool.ConfigurePool(cfg, url)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// benchDB names a run's database after its process, so that two runs at
// once (a profile beside a full run, say) do not drop each other's.
func benchDB() string { return fmt.Sprintf("phasepay_bench_%d", os.Getpid()) }

// partsDB is the database of the claim-by-partitions step.
func (e *env) partsDB() string { return e.dbName + "_parts" }

// armTemplate is the freshly migrated database each arm of an on/off step
// is cloned from (arms.go).
func (e *env) armTemplate() string { return e.dbName + "_armtpl" }

// urlOf is the run's database URL with another database's name.
func (e *env) urlOf(name string) string {
	u, err := url.Parse(e.dbURL)
	if err != nil {
		return ""
	}
	u.Path = "/" + name
	return u.String()
}

// makeArmTemplate copies the freshly migrated database (its tenant and API
// key included) and turns autovacuum off on each of its tables: on a server
// that runs autovacuum, one starting inside an arm would cost that arm alone.
func (e *env) makeArmTemplate(ctx context.Context) error {
	name := e.armTemplate()
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+name+" TEMPLATE "+e.dbName); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, e.urlOf(name))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `
DO $$
DECLARE t regclass;
BEGIN
  FOR t IN SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  LOOP
    EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)', t);
  END LOOP;
END $$`)
	return err
}

func (e *env) teardown() {
	if e.claims != nil {
		e.claims.Close()
	}
	if e.pool != nil {
		e.pool.Close()
	}
	ctx := context.Background()
	_, _ = e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.dbName+" WITH (FORCE)")
	_, _ = e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.partsDB()+" WITH (FORCE)")
	_, _ = e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+e.armTemplate()+" WITH (FORCE)")
	e.admin.Close(ctx)
}

func (e *env) run(ctx context.Context, bin string, extra map[string]string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(e.cfg.BinDir, bin), args...)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+e.dbURL)
	for k, v := range extra {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out) + string(ee.Stderr), err
	}
	return string(out), err
}
