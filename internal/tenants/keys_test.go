package tenants_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/testutil/testdb"
	"github.com/phasepay/phasepay/migrations"
)

// createKey makes a key for tenant name, committed, and returns its secret
// and its id.
func createKey(t *testing.T, q interface {
	tenants.DBTX
	Begin(context.Context) (pgx.Tx, error)
}, name string) (secret, id string) {
	t.Helper()
	err := pgx.BeginFunc(t.Context(), q, func(tx pgx.Tx) error {
		var err error
		if _, secret, err = tenants.CreateKey(t.Context(), tx, name); err != nil {
			return err
		}
		sum := sha256.Sum256([]byte(secret))
		return tx.QueryRow(t.Context(), `SELECT id FROM api_keys WHERE key_hash = $1`, sum[:]).Scan(&id)
	})
	require.NoError(t, err)
	return secret, id
}

func TestRevokedKeyIsRefused(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	secret, id := createKey(t, pool, "acme")
	other, _ := createKey(t, pool, "acme")

	k, already, err := tenants.RevokeKey(ctx, pool, id)
	require.NoError(t, err)
	require.False(t, already)
	require.Equal(t, id, k.ID)
	require.NotNil(t, k.RevokedAt)
	_, err = tenants.Authenticate(ctx, pool, secret)
	require.ErrorIs(t, err, tenants.ErrUnauthorized)
	_, err = tenants.Authenticate(ctx, pool, other)
	require.NoError(t, err, "revoking one key leaves the tenant's others working")

	// Twice: harmless, and the first revocation time stays.
	again, already, err := tenants.RevokeKey(ctx, pool, id)
	require.NoError(t, err)
	require.True(t, already)
	require.Equal(t, k.RevokedAt.UTC(), again.RevokedAt.UTC())

	_, _, err = tenants.RevokeKey(ctx, pool, "key_doesnotexist")
	require.ErrorIs(t, err, tenants.ErrKeyNotFound)
}

// TestRevocationNotifiesOnlyOnCommit: the notification that makes every
// process drop a key travels with the revocation's transaction, so a
// rolled-back revocation announces nothing and a committed one always does.
func TestRevocationNotifiesOnlyOnCommit(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testdb.NewURL(t)
	pool := testdb.Pool(t, url, time.Time{})
	_, id := createKey(t, pool, "acme")

	listener, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, "LISTEN "+tenants.RevocationChannel)
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, _, err = tenants.RevokeKey(ctx, tx, id)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	waitCtx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = listener.WaitForNotification(waitCtx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a rolled-back revocation must not be announced")

	_, _, err = tenants.RevokeKey(ctx, pool, id)
	require.NoError(t, err)
	waitCtx, cancel = context.WithTimeout(ctx, 5*time.Second)
	n, err := listener.WaitForNotification(waitCtx)
	cancel()
	require.NoError(t, err)
	var hash []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT key_hash FROM api_keys WHERE id = $1`, id).Scan(&hash))
	require.Equal(t, hex.EncodeToString(hash), n.Payload, "the payload names the key by its hash, as the cache does")
}

func TestKeyPrefixIsAtMost8Characters(t *testing.T) {
	t.Parallel()
	pool := testdb.New(t)
	secret, _ := createKey(t, pool, "acme")
	keys, err := tenants.ListKeys(t.Context(), pool, "acme")
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.LessOrEqual(t, len(keys[0].Prefix), 8)
	require.True(t, strings.HasPrefix(secret, keys[0].Prefix))

	_, err = pool.Exec(t.Context(), `UPDATE api_keys SET prefix = 'sk_123456'`)
	require.Error(t, err, "the table refuses a prefix longer than 8 characters")
}

// TestOldKeyPrefixesAreCutTo8: keys made before migration 00005 stored 9
// characters; after it they list with 8, and keep working.
func TestOldKeyPrefixesAreCutTo8(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	adminCfg, err := pgx.ParseConfig(testdb.Admin(t))
	require.NoError(t, err)
	cfg := adminCfg.Copy()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "phasepay_tenants_" + hex.EncodeToString(b)
	admin, err := pgx.ConnectConfig(ctx, adminCfg)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.ConnectConfig(ctx, adminCfg)
		require.NoError(t, err)
		defer admin.Close(ctx)
		_, err = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		require.NoError(t, err)
	})

	cfg.Database = name
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 4)
	require.NoError(t, err)
	const oldSecret = "sk_0123456789abcdef"
	sum := sha256.Sum256([]byte(oldSecret))
	_, err = db.ExecContext(ctx, `
WITH t AS (INSERT INTO tenants (name) VALUES ('old') RETURNING id)
INSERT INTO api_keys (tenant_id, key_hash, prefix) SELECT id, $1, 'sk_012345' FROM t`, sum[:])
	require.NoError(t, err)
	_, err = p.UpTo(ctx, 5)
	require.NoError(t, err)

	pool := testdb.Pool(t, cfg.ConnString(), time.Time{}, func(c *pgxpool.Config) { c.ConnConfig.Database = name })
	keys, err := tenants.ListKeys(ctx, pool, "old")
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, "sk_01234", keys[0].Prefix)
	require.True(t, strings.HasPrefix(keys[0].ID, "key_"), "an old key gets an id: %q", keys[0].ID)
	got, err := tenants.Authenticate(ctx, pool, oldSecret)
	require.NoError(t, err)
	require.Equal(t, "old", got.Name)
}

func TestListKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	_, first := createKey(t, pool, "acme")
	_, second := createKey(t, pool, "acme")
	createKey(t, pool, "globex")
	_, _, err := tenants.RevokeKey(ctx, pool, first)
	require.NoError(t, err)

	keys, err := tenants.ListKeys(ctx, pool, "acme")
	require.NoError(t, err)
	require.Len(t, keys, 2, "only acme's keys")
	require.Equal(t, second, keys[0].ID, "newest first")
	require.Nil(t, keys[0].RevokedAt)
	require.Equal(t, first, keys[1].ID)
	require.NotNil(t, keys[1].RevokedAt)
	require.False(t, keys[1].CreatedAt.IsZero())

	_, err = tenants.ListKeys(ctx, pool, "acmee")
	require.ErrorIs(t, err, tenants.ErrTenantNotFound)
	_, err = pool.Exec(ctx, `INSERT INTO tenants (name) VALUES ('keyless')`)
	require.NoError(t, err)
	keys, err = tenants.ListKeys(ctx, pool, "keyless")
	require.NoError(t, err)
	require.Empty(t, keys)
}
