// Package migrations holds phasepay's schema as goose SQL migrations, embedded
// so that bin/api migrate needs no files beside the binary.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS

// Up applies every pending migration. It is safe to run twice and from two
// processes at once: goose takes a session advisory lock around the run.
func Up(ctx context.Context, db *sql.DB) error { return UpTo(ctx, db, 0) }

// UpTo applies the pending migrations up to version and including it; 0
// means every one (Up). The profile's A/B mode (tools/profile) compares
// a schema without a migration against one with it.
func UpTo(ctx context.Context, db *sql.DB, version int64) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migrations: locker: %w", err)
	}
	// Out of order: 00010 (charge_attempts) landed after 00011 (events),
	// and a database migrated in between must still take it.
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS, goose.WithSessionLocker(locker), goose.WithAllowOutofOrder(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if version == 0 {
		_, err = p.Up(ctx)
	} else {
		_, err = p.UpTo(ctx, version)
	}
	if err != nil {
		return fmt.Errorf("migrations: up: %w", err)
	}
	return nil
}

// UpURL applies every pending migration to the database at url.
func UpURL(ctx context.Context, url string) error { return UpToURL(ctx, url, 0) }

// UpToURL is UpTo on the database at url.
func UpToURL(ctx context.Context, url string, version int64) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	return UpTo(ctx, db, version)
}
