package tenants

import (
	"context"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// hookDB runs after, once, when the row of a lookup has been read: the
// moment between a lookup's answer and the cache storing it.
type hookDB struct {
	DBTX
	after func()
}

func (h *hookDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return hookRow{Row: h.DBTX.QueryRow(ctx, sql, args...), db: h}
}

type hookRow struct {
	pgx.Row
	db *hookDB
}

func (r hookRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if f := r.db.after; f != nil {
		r.db.after = nil
		f()
	}
	return err
}

// TestRevocationDuringLookupIsNotCached: a lookup that read the key just
// before its revocation committed must not store it after the listener
// evicted it, or the revoked key would work for a whole TTL.
func TestRevocationDuringLookupIsNotCached(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testdb.New(t)
	var secret string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		_, secret, err = CreateKey(ctx, tx, "acme")
		return err
	})
	require.NoError(t, err)
	sum := sha256.Sum256([]byte(secret))
	var id string
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM api_keys WHERE key_hash = $1`, sum[:]).Scan(&id))

	db := &hookDB{DBTX: pool}
	a := NewAuthenticator(db, time.Minute)
	db.after = func() {
		// The lookup has read the key as valid; now it is revoked, and
		// the listener, hearing of it, evicts a key not yet stored.
		_, _, err := RevokeKey(ctx, pool, id)
		require.NoError(t, err)
		a.forget(sum)
	}
	_, err = a.Authenticate(ctx, secret)
	require.NoError(t, err, "the lookup began before the revocation")
	_, err = a.Authenticate(ctx, secret)
	require.ErrorIs(t, err, ErrUnauthorized, "the answer read before the revocation must not have been cached")
}
