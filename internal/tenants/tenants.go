// Package tenants owns who is calling: tenants and their secret API keys.
// Only a key's SHA-256 is stored; the secret is shown once, at creation.
package tenants

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnauthorized: no key, a key that matches no tenant, or a revoked key.
var ErrUnauthorized = errors.New("unauthorized")

// Tenant is an account; every key and charge belongs to one.
type Tenant struct {
	ID   int64
	Name string
}

// DBTX is what the functions run their statements on (a pool or a tx).
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// secretPrefix marks phasepay secret keys, so that leaked ones are easy to
// recognise (and to scan for).
const secretPrefix = "sk_"

// PrefixLen is how many characters of a secret are stored and listed, to
// tell keys apart: "sk_" and 5 hex digits. The contract allows at most 8, so
// that no useful part of a secret is ever shown; the table enforces it
// (api_keys_prefix_length).
const PrefixLen = 8

// upsertTenantSQL returns the tenant's id whether or not it existed. The
// no-op update makes RETURNING yield the existing row on conflict.
const upsertTenantSQL = `
INSERT INTO tenants (name) VALUES ($1)
ON CONFLICT (name) DO UPDATE SET name = excluded.name
RETURNING id`

const insertKeySQL = `INSERT INTO api_keys (tenant_id, key_hash, prefix) VALUES ($1, $2, $3)`

// CreateKey creates the tenant if it is new and returns a new secret key for
// it. Run it in a transaction so that a failure leaves no half-made tenant.
func CreateKey(ctx context.Context, q DBTX, tenantName string) (Tenant, string, error) {
	if strings.TrimSpace(tenantName) == "" {
		return Tenant{}, "", errors.New("create key: tenant name is empty")
	}
	t := Tenant{Name: tenantName}
	if err := q.QueryRow(ctx, upsertTenantSQL, tenantName).Scan(&t.ID); err != nil {
		return Tenant{}, "", fmt.Errorf("create key for %q: tenant: %w", tenantName, err)
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw) // never fails (crypto/rand)
	secret := secretPrefix + hex.EncodeToString(raw)
	sum := sha256.Sum256([]byte(secret))
	if _, err := q.Exec(ctx, insertKeySQL, t.ID, sum[:], secret[:PrefixLen]); err != nil {
		return Tenant{}, "", fmt.Errorf("create key for %q: %w", tenantName, err)
	}
	return t, secret, nil
}

// authenticateSQL finds the tenant of a key that is not revoked. A revoked
// key's row stays (RevokeKey), so the filter is what refuses it.
const authenticateSQL = `
SELECT t.id, t.name FROM api_keys k JOIN tenants t ON t.id = k.tenant_id
 WHERE k.key_hash = $1 AND k.revoked_at IS NULL`

// Authenticate returns the tenant a secret key belongs to, or
// ErrUnauthorized (also for a revoked key). The lookup is by hash: the secret never reaches the
// database, and a comparison timing leaks nothing of a stored secret.
func Authenticate(ctx context.Context, q DBTX, secret string) (Tenant, error) {
	if !strings.HasPrefix(secret, secretPrefix) {
		return Tenant{}, ErrUnauthorized
	}
	sum := sha256.Sum256([]byte(secret))
	var t Tenant
	err := q.QueryRow(ctx, authenticateSQL, sum[:]).Scan(&t.ID, &t.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return Tenant{}, ErrUnauthorized
	}
	if err != nil {
		return Tenant{}, fmt.Errorf("authenticate: %w", err)
	}
	return t, nil
}

type ctxKey struct{}

// NewContext returns ctx carrying the calling tenant.
func NewContext(ctx context.Context, t Tenant) context.Context {
	return context.WithValue(ctx, ctxKey{}, t)
}

// FromContext returns the calling tenant, if authenticated.
func FromContext(ctx context.Context) (Tenant, bool) {
	t, ok := ctx.Value(ctxKey{}).(Tenant)
	return t, ok
}
