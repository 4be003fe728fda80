package charges

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
	"golang.org/x/sync/singleflight"

	"github.com/phasepay/phasepay/internal/dbstate"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/phases"
)

// Object ids a retry derives again (pitfall F2 "A claim lost in a
// failover").
//
// A new charge's id names its PSP key (<charge id>:authorize) and its PSP
// reference; a refund's, its key (<refund id>:refund) and reference. With
// asynchronous replication, a claim committed on the old primary and not
// yet replicated is gone after the promotion, charge row and all, while
// the PSP may already hold an authorization under the charge's key. The
// client's retry claims the key again: with a random id it made a new
// charge, a new PSP key, and a second authorization that no fencing can
// see. Derived from what the retry carries, the id is the same, the PSP
// key too, and the PSP answers the repeat with its first answer (while it
// remembers the key: a day at real PSPs).
//
// The derivation is HMAC-SHA256 under a secret of the database's
// (migrations/00021), over the tenant, the idempotency key, the request's
// fingerprint and the key's incarnation:
//   - the tenant: ids stay unique across tenants (PSP keys must be);
//   - the secret: a tenant who knows another's key and body cannot compute
//     its ids, nor test a guess of them against an id it saw;
//   - the incarnation: the same key and body claimed again after retention
//     forgot the key is a new intent, whose charge must not collide with
//     the one the previous incarnation created (charges are kept forever).
//     The engine derives incarnation 0 first; an id an earlier incarnation
//     holds fails the insert (ErrObjectIDTaken), and it derives the next
//     (phases.ObjectIDAttempts bounds the tries). A retry after a lost
//     claim meets the same earlier incarnations, all replicated long ago,
//     and so derives the same id as the claim it repeats.
//
// Capture and void create nothing: their object is the charge in the path.

// objectIDSecretSQL reads the secret, written once by the migration.
const objectIDSecretSQL = `SELECT secret FROM object_id_secret`

// objectIDs derives the ids of new charges and refunds.
type objectIDs struct {
	secret atomic.Pointer[[]byte]
	// reads: the requests a process starts with share one read of the
	// secret rather than each taking a connection for the same row.
	reads singleflight.Group
	// random makes every id random, as past the incarnation bound: for
	// tests of what such ids do (RandomIDs).
	random atomic.Bool
}

// load reads the secret once per process (it never changes). An error is
// the database's: the request answers 503 and its retry reads it again.
func (ids *objectIDs) load(ctx context.Context, q idempotency.DBTX) error {
	if ids.secret.Load() != nil {
		return nil
	}
	read := ids.reads.DoChan("secret", func() (any, error) {
		var secret []byte
		if err := q.QueryRow(ctx, objectIDSecretSQL).Scan(&secret); err != nil {
			return nil, fmt.Errorf("object id secret: %w", dbstate.Wrap(err))
		}
		ids.secret.Store(&secret)
		return nil, nil
	})
	select {
	case r := <-read:
		return r.Err
	case <-ctx.Done():
		return fmt.Errorf("object id secret: %w", dbstate.Wrap(ctx.Err()))
	}
}

// charge is authorize's ObjectID.
func (ids *objectIDs) charge(tenantID int64, key string, req phases.Request, inc phases.Incarnation) string {
	return ids.derive("ch_", tenantID, key, req.Fingerprint, inc)
}

// derived reports whether id is a charge id derived for the tenant, key and
// request (some incarnation of ObjectID's), rather than a random one: a
// retry of a lost claim derives it again (see pinned, failover.go).
func (ids *objectIDs) derived(tenantID int64, key string, req phases.Request, id string) bool {
	secret := ids.secret.Load()
	if secret == nil || ids.random.Load() {
		return false
	}
	for n := range phases.ObjectIDAttempts {
		if hmacID(*secret, "ch_", tenantID, key, req.Fingerprint, n) == id {
			return true
		}
	}
	return false
}

// refund is refund's ObjectID.
func (ids *objectIDs) refund(tenantID int64, key string, req phases.Request, inc phases.Incarnation) string {
	return ids.derive("re_", tenantID, key, req.Fingerprint, inc)
}

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// derive returns the id of the incarnation inc asks for. The engine's last
// resort (no incarnation derived), or a process without the secret (an
// entry point that did not load it, a bug), gets a random id: never a
// derived one that might collide.
func (ids *objectIDs) derive(prefix string, tenantID int64, key string, fp idempotency.Fingerprint, inc phases.Incarnation) string {
	secret := ids.secret.Load()
	n, ok := inc.Derived()
	if secret == nil || !ok || ids.random.Load() {
		return newID(prefix)
	}
	return hmacID(*secret, prefix, tenantID, key, fp, n)
}

// hmacID returns prefix and 24 base-32 characters (120 bits, the shape of
// newID's) of the HMAC of the n-th incarnation's id.
func hmacID(secret []byte, prefix string, tenantID int64, key string, fp idempotency.Fingerprint, n int) string {
	mac := hmac.New(sha256.New, secret)
	var b []byte
	b = append(b, prefix...)
	b = binary.BigEndian.AppendUint64(b, uint64(tenantID))
	b = binary.BigEndian.AppendUint32(b, uint32(len(key)))
	b = append(b, key...)
	b = append(b, fp[:]...)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	mac.Write(b)
	return prefix + idEncoding.EncodeToString(mac.Sum(nil)[:15])
}

// uniqueViolation is SQLSTATE 23505.
const uniqueViolation = "23505"

// idTaken translates the insert of a new object failing on its primary key
// (constraint) into phases.ErrObjectIDTaken: the derived id is an earlier
// incarnation's.
func idTaken(err error, constraints ...string) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && pg.Code == uniqueViolation {
		for _, c := range constraints {
			if pg.ConstraintName == c {
				return fmt.Errorf("%w: %w", phases.ErrObjectIDTaken, err)
			}
		}
	}
	return err
}
