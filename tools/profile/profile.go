// Package profile is `make profile`: what one new charge costs the database,
// row by row. On a throw-away cluster (internal/testutil/pgcluster, with
// pg_stat_statements and track_io_timing) it migrates the schema, runs the
// real api and mock PSP, drives new charges and reports per charge each
// statement's calls and time, each table's inserts and (HOT) updates, each
// index's entries (counted in the WAL with pg_waldump), the WAL's bytes and
// full-page images, the database's and the api's CPU, and the api's CPU
// profile. Its A/B mode (Config.AB) runs a schema migrated up to a version
// against the latest, alternating, to measure one migration.
package profile

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/events"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/migrations"
	"github.com/phasepay/phasepay/tools/procs"
)

// Config says what to profile. The zero value profiles 3000 charges at 8
// clients once.
type Config struct {
	// Charges is the new charges measured per run. Default 3000.
	Charges int
	// Clients is the concurrent closed-loop clients. Default 8.
	Clients int
	// Warmup is the charges sent before each run, not measured (the api's
	// pool and plan caches fill; ANALYZE follows them). Default 300.
	Warmup int
	// BinDir holds api and mockpsp; empty builds them into a temporary
	// directory (procs.Binaries).
	BinDir string
	// PprofSeconds is how long the api's CPU profile runs, from the start
	// of the measured charges; 0 takes none. A/B runs take none.
	PprofSeconds int
	// AB, when not 0, is a migration version: the schema migrated up to it
	// (A) is profiled against the latest (B), alternately, Rounds times
	// each.
	AB int64
	// Rounds is the A/B rounds. Default 2 (A B A B).
	Rounds int
	// Progress receives a line per step. Default io.Discard.
	Progress io.Writer
}

func (c *Config) defaults() {
	c.Charges = cmp.Or(c.Charges, 3000)
	c.Clients = cmp.Or(c.Clients, 8)
	c.Warmup = cmp.Or(c.Warmup, 300)
	c.Rounds = cmp.Or(c.Rounds, 2)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// clusterSettings: pg_stat_statements for the statements; full_page_writes
// back on (pgcluster turns it off for speed), since the full-page images a
// charge causes are part of its cost; no autovacuum, whose work would be
// counted as the charges' (each run ANALYZEs after its warm-up instead).
var clusterSettings = map[string]string{
	"shared_preload_libraries": "'pg_stat_statements'",
	"track_io_timing":          "on",
	"full_page_writes":         "on",
	"autovacuum":               "off",
	"max_wal_size":             "'4GB'",
}

// stack is what a run needs: the cluster, the binaries, the mock PSP.
type stack struct {
	cfg     Config
	cluster *pgcluster.Cluster
	bin     string
	pspURL  string
	tmp     string
	log     func(format string, args ...any)
}

// Run profiles and returns one Result per run: one, or A B A B … in A/B
// mode.
func Run(ctx context.Context, cfg Config) ([]*Result, error) {
	cfg.defaults()
	s := &stack{cfg: cfg, log: func(f string, a ...any) { fmt.Fprintf(cfg.Progress, f+"\n", a...) }}
	bin, cleanup, err := procs.Binaries(ctx, cfg.BinDir, "", cfg.Progress)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	s.bin = bin
	if s.tmp, err = os.MkdirTemp("", "phasepay-profile-"); err != nil {
		return nil, err
	}
	defer os.RemoveAll(s.tmp)
	s.log("starting a throw-away cluster")
	if s.cluster, err = pgcluster.New(ctx, pgcluster.Config{Settings: clusterSettings}); err != nil {
		return nil, err
	}
	defer s.cluster.Close()
	pspAddr, err := procs.FreeAddr()
	if err != nil {
		return nil, err
	}
	psp := procs.New("mockpsp", filepath.Join(bin, "mockpsp"), map[string]string{"MOCKPSP_ADDR": pspAddr})
	if err := psp.Start(); err != nil {
		return nil, err
	}
	defer psp.Stop(10e9)
	s.pspURL = "http://" + pspAddr
	if err := procs.WaitUp(ctx, s.pspURL+"/_admin/authorizations"); err != nil {
		return nil, fmt.Errorf("mockpsp: %w", err)
	}

	type schema struct {
		label   string
		version int64
		db      *database
	}
	schemas := []*schema{{label: "latest"}}
	if cfg.AB != 0 {
		schemas = []*schema{{label: "A (up to " + strconv.FormatInt(cfg.AB, 10) + ")", version: cfg.AB}, {label: "B (latest)"}}
	}
	for i, sc := range schemas {
		if sc.db, err = s.newDatabase(ctx, fmt.Sprintf("profile_%d", i), sc.version); err != nil {
			return nil, err
		}
	}
	rounds := 1
	if cfg.AB != 0 {
		rounds = cfg.Rounds
	}
	var results []*Result
	for r := range rounds {
		for _, sc := range schemas {
			s.log("run %d, schema %s: %d charges at %d clients", r+1, sc.label, cfg.Charges, cfg.Clients)
			res, err := s.run(ctx, sc.db, fmt.Sprintf("r%d", r), cfg.AB == 0)
			if err != nil {
				return nil, fmt.Errorf("%s, run %d: %w", sc.label, r+1, err)
			}
			res.Schema, res.SchemaVersion = sc.label, sc.version
			results = append(results, res)
		}
	}
	return results, nil
}

// database is one migrated database of the cluster and its API key.
type database struct {
	name, url, apiKey string
}

// newDatabase creates a database migrated up to version (0: every
// migration), with the partitions `api migrate` makes and an API key.
func (s *stack) newDatabase(ctx context.Context, name string, version int64) (*database, error) {
	return s.newDatabaseWith(ctx, name, version, true)
}

// newDatabaseWith is newDatabase, with pg_stat_statements created in it
// only if statements is set (the server must preload it).
func (s *stack) newDatabaseWith(ctx context.Context, name string, version int64, statements bool) (*database, error) {
	url, err := s.cluster.CreateDatabase(ctx, name)
	if err != nil {
		return nil, err
	}
	s.log("migrating %s (version %d; 0 is the latest)", name, version)
	if err := migrations.UpToURL(ctx, url, version); err != nil {
		return nil, err
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if statements {
		if _, err := conn.Exec(ctx, "CREATE EXTENSION pg_stat_statements"); err != nil {
			return nil, err
		}
	}
	if _, err := idempotency.EnsurePartitions(ctx, conn); err != nil {
		return nil, err
	}
	if _, err := events.EnsurePartitions(ctx, conn); err != nil {
		return nil, err
	}
	key, err := procs.RunOnce(ctx, filepath.Join(s.bin, "api"), map[string]string{"DATABASE_URL": url}, "keys", "create", "--tenant", "profile")
	if err != nil {
		return nil, err
	}
	return &database{name: name, url: url, apiKey: key}, nil
}
