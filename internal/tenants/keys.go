package tenants

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrTenantNotFound: no tenant has that name.
var ErrTenantNotFound = errors.New("tenant not found")

// ErrKeyNotFound: no key has that id.
var ErrKeyNotFound = errors.New("api key not found")

// Key is what an operator may see of an API key: never its secret or hash.
type Key struct {
	// ID names the key to an operator ("key_…"); it is not a credential.
	ID string
	// Prefix is the secret's first PrefixLen characters or fewer.
	Prefix    string
	CreatedAt time.Time
	// RevokedAt is when the key was revoked; nil while it works.
	RevokedAt *time.Time
}

// RevocationChannel is the PostgreSQL notification channel a revocation is
// announced on; its payload is the revoked key's hash in hex. Every api
// process listens on it (RevocationListener) to drop the key from its cache.
const RevocationChannel = "phasepay_api_keys"

// listKeysSQL reads one tenant's keys, newest first. left() keeps a listing
// within PrefixLen even for a row that predates the constraint.
const listKeysSQL = `
SELECT k.id, left(k.prefix, 8), k.created_at, k.revoked_at
  FROM tenants t JOIN api_keys k ON k.tenant_id = t.id
 WHERE t.name = $1
 ORDER BY k.created_at DESC, k.id DESC`

const tenantExistsSQL = `SELECT EXISTS (SELECT FROM tenants WHERE name = $1)`

// ListKeys returns the keys of the tenant named tenantName, newest first, or
// ErrTenantNotFound.
func ListKeys(ctx context.Context, q DBTX, tenantName string) ([]Key, error) {
	rows, err := q.Query(ctx, listKeysSQL, tenantName)
	if err != nil {
		return nil, fmt.Errorf("list keys of %q: %w", tenantName, err)
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Key, error) {
		var k Key
		return k, r.Scan(&k.ID, &k.Prefix, &k.CreatedAt, &k.RevokedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("list keys of %q: %w", tenantName, err)
	}
	if len(keys) > 0 {
		return keys, nil
	}
	// No keys: tell a tenant without keys from a misspelt name.
	var exists bool
	if err := q.QueryRow(ctx, tenantExistsSQL, tenantName).Scan(&exists); err != nil {
		return nil, fmt.Errorf("list keys of %q: %w", tenantName, err)
	}
	if !exists {
		return nil, fmt.Errorf("list keys of %q: %w", tenantName, ErrTenantNotFound)
	}
	return keys, nil
}

// revokeKeySQL marks the key revoked and announces it, in one statement and
// so in one transaction: PostgreSQL delivers a notification only when its
// transaction commits, so the api processes hear of exactly the revocations
// that happened, and only once a fresh lookup would see them. Revoking a
// revoked key keeps its first revocation time and announces it again, which
// is harmless (a process that had it cached drops it, once more).
const revokeKeySQL = `
WITH revoked AS (
    UPDATE api_keys SET revoked_at = coalesce(revoked_at, now())
     WHERE id = $1
    RETURNING id, left(prefix, 8) AS prefix, created_at, revoked_at, key_hash
)
SELECT id, prefix, created_at, revoked_at, revoked_at <> now(),
       pg_notify('` + RevocationChannel + `', encode(key_hash, 'hex'))
  FROM revoked`

// RevokeKey revokes the key with that id and returns it, or ErrKeyNotFound;
// already reports that it had been revoked before (by another transaction:
// now() is the transaction's start, which a revocation by this one
// records). Every api process refuses the key within about a second
// (RevocationListener).
func RevokeKey(ctx context.Context, q DBTX, id string) (k Key, already bool, err error) {
	err = q.QueryRow(ctx, revokeKeySQL, id).Scan(&k.ID, &k.Prefix, &k.CreatedAt, &k.RevokedAt, &already, nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return Key{}, false, fmt.Errorf("revoke %s: %w", id, ErrKeyNotFound)
	}
	if err != nil {
		return Key{}, false, fmt.Errorf("revoke %s: %w", id, err)
	}
	return k, already, nil
}

// keyHash is the cache's key: the SHA-256 of a secret.
type keyHash = [sha256.Size]byte

// parseKeyHash reads a revocation's payload.
func parseKeyHash(payload string) (keyHash, bool) {
	var h keyHash
	b, err := hex.DecodeString(payload)
	if err != nil || len(b) != len(h) {
		return h, false
	}
	copy(h[:], b)
	return h, true
}
