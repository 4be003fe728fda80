package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/tenants"
)

// keysTimeout bounds one keys command, so that an unreachable database
// fails it instead of leaving the operator waiting.
const keysTimeout = 30 * time.Second

var keysCreateCommand = &command{
	name:    "create",
	args:    "--tenant NAME",
	summary: "print a new secret API key for tenant NAME, creating the tenant if new",
	help: `The secret is printed alone on stdout, once: only its SHA-256 is stored, and
a lost secret cannot be shown again (create another and revoke the lost one).`,
	flags: func(fs *flag.FlagSet) action {
		tenant := fs.String("tenant", "", "the tenant's `NAME` (created if new)")
		return func(ctx context.Context, inv *invocation) error {
			if *tenant == "" {
				return usageErrorf("--tenant is required")
			}
			if len(inv.args) > 0 {
				return usageErrorf("unexpected argument %q", inv.args[0])
			}
			secret, err := createKey(ctx, inv.cfg, *tenant)
			if err != nil {
				return err
			}
			_, err = fmt.Fprintln(inv.stdout, secret)
			return err
		}
	},
}

var keysListCommand = &command{
	name:    "list",
	args:    "--tenant NAME [--json]",
	summary: "list tenant NAME's keys, newest first: id, prefix, created, revoked or not",
	help: `One line per key: its id (what keys revoke takes), the first 8 characters
of its secret at most, when it was created, and "active" or "revoked" with
the time. --json prints one JSON object per line instead:
{"id":"key_…","prefix":"sk_…","created_at":"…","revoked_at":null}.
A secret is never shown. An unknown tenant exits 1.`,
	flags: func(fs *flag.FlagSet) action {
		tenant := fs.String("tenant", "", "the tenant's `NAME`")
		asJSON := fs.Bool("json", false, "one JSON object per line")
		return func(ctx context.Context, inv *invocation) error {
			if *tenant == "" {
				return usageErrorf("--tenant is required")
			}
			if len(inv.args) > 0 {
				return usageErrorf("unexpected argument %q", inv.args[0])
			}
			keys, err := listKeys(ctx, inv.cfg, *tenant)
			if errors.Is(err, tenants.ErrTenantNotFound) {
				return fmt.Errorf("no tenant is named %q", *tenant)
			}
			if err != nil {
				return err
			}
			if *asJSON {
				return writeKeysJSON(inv.stdout, keys)
			}
			return writeKeysText(inv.stdout, keys)
		}
	},
}

var keysRevokeCommand = &command{
	name:    "revoke",
	args:    "ID",
	summary: "refuse key ID (as keys list shows it) in every running api process within 1 s",
	help: `Every api process drops the key from its cache as soon as the revocation
commits and answers 401 for it from then on. Revoking a revoked key is
harmless. An unknown ID exits 1.`,
	flags: func(fs *flag.FlagSet) action {
		return func(ctx context.Context, inv *invocation) error {
			if len(inv.args) != 1 || inv.args[0] == "" {
				return usageErrorf("one key ID is required")
			}
			id := inv.args[0]
			k, already, err := revokeKey(ctx, inv.cfg, id)
			if errors.Is(err, tenants.ErrKeyNotFound) {
				return fmt.Errorf("no API key has id %q", id)
			}
			if err != nil {
				return err
			}
			msg := "api key revoked"
			if already {
				msg = "api key was already revoked"
			}
			inv.logger.Info(msg, "id", k.ID, "prefix", k.Prefix, "revoked_at", k.RevokedAt.UTC().Format(time.RFC3339Nano))
			return nil
		}
	},
}

// keyJSON is one line of keys list --json.
type keyJSON struct {
	ID        string     `json:"id"`
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at"`
}

func writeKeysJSON(w io.Writer, keys []tenants.Key) error {
	enc := json.NewEncoder(w)
	for _, k := range keys {
		line := keyJSON{ID: k.ID, Prefix: k.Prefix, CreatedAt: k.CreatedAt.UTC(), RevokedAt: k.RevokedAt}
		if k.RevokedAt != nil {
			t := k.RevokedAt.UTC()
			line.RevokedAt = &t
		}
		if err := enc.Encode(line); err != nil {
			return err
		}
	}
	return nil
}

func writeKeysText(w io.Writer, keys []tenants.Key) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, k := range keys {
		state := "active"
		if k.RevokedAt != nil {
			state = "revoked " + k.RevokedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.ID, k.Prefix, k.CreatedAt.UTC().Format(time.RFC3339), state)
	}
	return tw.Flush()
}

// withConn runs f on a connection of its own to DATABASE_URL (fit for
// its pooler, dbpool.Config.ConnConfig), under keysTimeout.
func withConn(ctx context.Context, cfg Config, f func(ctx context.Context, conn *pgx.Conn) error) error {
	ctx, cancel := context.WithTimeout(ctx, keysTimeout)
	defer cancel()
	connCfg, err := cfg.database().ConnConfig()
	if err != nil {
		return err
	}
	conn, err := pgx.ConnectConfig(ctx, connCfg)
	if err != nil {
		return err
	}
	dbpool.RegisterExecTypes(conn)
	defer conn.Close(context.WithoutCancel(ctx))
	return f(ctx, conn)
}

func createKey(ctx context.Context, cfg Config, tenant string) (string, error) {
	var secret string
	err := withConn(ctx, cfg, func(ctx context.Context, conn *pgx.Conn) error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var err error
			_, secret, err = tenants.CreateKey(ctx, tx, tenant)
			return err
		})
	})
	return secret, err
}

func listKeys(ctx context.Context, cfg Config, tenant string) ([]tenants.Key, error) {
	var keys []tenants.Key
	err := withConn(ctx, cfg, func(ctx context.Context, conn *pgx.Conn) error {
		var err error
		keys, err = tenants.ListKeys(ctx, conn, tenant)
		return err
	})
	return keys, err
}

// revokeKey revokes key id; already reports that it was revoked before.
func revokeKey(ctx context.Context, cfg Config, id string) (k tenants.Key, already bool, err error) {
	err = withConn(ctx, cfg, func(ctx context.Context, conn *pgx.Conn) error {
		var err error
		k, already, err = tenants.RevokeKey(ctx, conn, id)
		return err
	})
	return k, already, err
}
