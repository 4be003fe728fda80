package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/phasepay/phasepay/internal/testutil/testdb"
)

// 00035 replaced the CHECKs of idempotency_keys and charges with one each,
// calling a function: every row one of them refused is refused still, with
// the same SQLSTATE, and a row they let through passes. Each write below
// breaks one of the old predicates (or none), on a row that is valid
// otherwise.
func TestChecksRefuseWhatTheyRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testdb.New(t)
	var tenant int64
	require.NoError(t, pool.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ('t') RETURNING id`).Scan(&tenant))
	var createdAt any
	require.NoError(t, pool.QueryRow(ctx, `
		INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body)
		VALUES ($1, 'k', sha256('x'), 'POST', '/v1/charges', '{}') RETURNING created_at`, tenant).Scan(&createdAt))
	_, err := pool.Exec(ctx, `
		INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at, amount, currency, payment_method, status)
		VALUES ($1, 'ch_1', 'k', $2, 100, 'usd', 'pm_card_visa', 'authorized')`, tenant, createdAt)
	require.NoError(t, err)

	const newKey = `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, request_method, request_path, request_body, state, response_status, response_body)
		VALUES ($1, %s, sha256('y'), 'POST', '/v1/charges', '{}', %s)`
	key := func(k, rest string) string {
		return strings.Replace(strings.Replace(newKey, "%s", k, 1), "%s", rest, 1)
	}
	const setCharge = `UPDATE charges SET %s WHERE tenant_id = $1 AND id = 'ch_1'`
	charge := func(set string) string { return strings.Replace(setCharge, "%s", set, 1) }
	for _, tt := range []struct {
		name, sql, constraint string // constraint "": accepted
	}{
		{"a key", key(`'k2'`, `'started', NULL, NULL`), ""},
		{"an empty key", key(`''`, `'started', NULL, NULL`), "idempotency_keys_valid"},
		{"a key of 256 bytes", key(`repeat('k', 256)`, `'started', NULL, NULL`), "idempotency_keys_valid"},
		{"a key of 255 bytes", key(`repeat('k', 255)`, `'started', NULL, NULL`), ""},
		{"an unknown state", key(`'k3'`, `'finished', NULL, NULL`), "idempotency_keys_valid"},
		{"done without a response", key(`'k4'`, `'done', 201, NULL`), "idempotency_keys_valid"},
		{"done with a response", key(`'k5'`, `'done', 201, '{}'`), ""},
		{"started with a response", key(`'k6'`, `'started', 201, '{}'`), "idempotency_keys_valid"},
		{"needs attention", key(`'k7'`, `'needs_attention', NULL, NULL`), ""},
		{"the key done without a response, updated", `UPDATE idempotency_keys SET state = 'done' WHERE tenant_id = $1 AND key = 'k'`, "idempotency_keys_valid"},

		{"a charge id of another kind", `INSERT INTO charges (tenant_id, id, idempotency_key, idempotency_key_created_at, amount, currency, payment_method, status)
			SELECT tenant_id, 're_1', idempotency_key, idempotency_key_created_at, 100, 'usd', 'pm_card_visa', 'pending' FROM charges WHERE tenant_id = $1`, "charges_valid"},
		{"captured in full", charge(`status = 'captured', settlement = 'capture', amount_captured = 100`), ""},
		{"captured below zero", charge(`amount_captured = -1`), "charges_valid"},
		{"captured past the amount", charge(`status = 'captured', settlement = 'capture', amount_captured = 101`), "charges_valid"},
		{"refunded below zero", charge(`status = 'captured', settlement = 'capture', amount_captured = 100, amount_refunded = -1`), "charges_valid"},
		{"refunding below zero", charge(`status = 'captured', settlement = 'capture', amount_captured = 100, amount_refunding = -1`), "charges_valid"},
		{"refunds past the capture", charge(`status = 'captured', settlement = 'capture', amount_captured = 50, amount_refunded = 30, amount_refunding = 30`), "charges_valid"},
		{"refunds up to the capture", charge(`status = 'captured', settlement = 'capture', amount_captured = 50, amount_refunded = 30, amount_refunding = 20`), ""},
		{"captured without its settlement", charge(`status = 'captured', amount_captured = 100`), "charges_valid"},
		{"captured with nothing captured", charge(`status = 'captured', settlement = 'capture'`), "charges_valid"},
		{"settled as captured, not captured", charge(`settlement = 'capture', amount_captured = 100`), "charges_valid"},
		{"voided", charge(`status = 'voided', settlement = 'void'`), ""},
		{"voided without its settlement", charge(`status = 'voided'`), "charges_valid"},
		{"voided as captured", charge(`status = 'voided', settlement = 'capture'`), "charges_valid"},
	} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, tt.sql, tenant); err != nil {
				return err
			}
			return errors.New("rolled back")
		})
		if tt.constraint == "" {
			require.EqualError(t, err, "rolled back", tt.name)
			continue
		}
		var pg *pgconn.PgError
		require.ErrorAs(t, err, &pg, tt.name)
		require.Equal(t, "23514", pg.Code, tt.name)
		require.Equal(t, tt.constraint, pg.ConstraintName, tt.name)
	}
}
