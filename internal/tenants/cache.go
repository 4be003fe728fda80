package tenants

import (
	"context"
	"crypto/sha256"
	"sync"
	"time"
)

// Authenticator resolves secret keys to tenants, remembering known keys for
// a short TTL: authentication is on every request's path, and a database
// round trip per request for an answer that almost never changes is the
// largest avoidable cost of a replay. The price is that a key deleted from
// api_keys keeps working in each process for up to TTL.
//
// Unknown keys are never cached, so a caller cycling through garbage keys
// cannot fill the cache; it is also bounded by MaxEntries.
type Authenticator struct {
	q   DBTX
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]cached
}

type cached struct {
	tenant  Tenant
	expires time.Time
}

// MaxEntries bounds the cache; past it the cache starts over.
const MaxEntries = 10_000

// NewAuthenticator returns an Authenticator on q; ttl 0 disables caching.
func NewAuthenticator(q DBTX, ttl time.Duration) *Authenticator {
	return &Authenticator{q: q, ttl: ttl, now: time.Now, entries: map[[sha256.Size]byte]cached{}}
}

// Authenticate is the package's Authenticate, cached.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (Tenant, error) {
	sum := sha256.Sum256([]byte(secret))
	now := a.now()
	a.mu.Lock()
	c, ok := a.entries[sum]
	a.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.tenant, nil
	}
	t, err := Authenticate(ctx, a.q, secret)
	if err != nil || a.ttl <= 0 {
		return t, err
	}
	a.mu.Lock()
	if len(a.entries) >= MaxEntries {
		a.entries = map[[sha256.Size]byte]cached{}
	}
	a.entries[sum] = cached{tenant: t, expires: now.Add(a.ttl)}
	a.mu.Unlock()
	return t, nil
}
