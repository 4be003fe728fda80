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
// largest avoidable cost of a replay.
//
// A revoked key must stop working at once, not after the TTL: a
// RevocationListener attached to the Authenticator drops a key from the
// cache as soon as its revocation commits, in every process. The TTL stays
// as the fallback for what the listener cannot see (a connection lost
// without the client noticing). While a listener is attached but not
// listening, revocations could pass unheard, so the cache is not used at
// all; without a listener (tests, tools) the cache is TTL-only.
//
// Unknown keys are never cached, so a caller cycling through garbage keys
// cannot fill the cache; it is also bounded by MaxEntries.
type Authenticator struct {
	q   DBTX
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex
	entries map[keyHash]cached
	// gen counts invalidations. A lookup stores its answer only if no
	// invalidation happened since it began: otherwise a lookup that read
	// the key just before its revocation committed could store it just
	// after the eviction, and the revoked key would work for a whole TTL.
	gen uint64
	// bypass is set while an attached listener is not listening: the
	// cache is neither read nor filled.
	bypass bool
}

type cached struct {
	tenant  Tenant
	expires time.Time
}

// CacheTTLDefault is the api's cache TTL: how long a revoked key may keep
// working in a process whose listener lost its connection without noticing.
const CacheTTLDefault = 30 * time.Second

// MaxEntries bounds the cache; past it the cache starts over.
const MaxEntries = 10_000

// NewAuthenticator returns an Authenticator on q; ttl 0 disables caching.
func NewAuthenticator(q DBTX, ttl time.Duration) *Authenticator {
	return &Authenticator{q: q, ttl: ttl, now: time.Now, entries: map[keyHash]cached{}}
}

// Authenticate is the package's Authenticate, cached.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (Tenant, error) {
	sum := sha256.Sum256([]byte(secret))
	now := a.now()
	a.mu.Lock()
	c, ok := a.entries[sum]
	gen := a.gen
	a.mu.Unlock()
	if ok && now.Before(c.expires) {
		return c.tenant, nil
	}
	t, err := Authenticate(ctx, a.q, secret)
	if err != nil || a.ttl <= 0 {
		return t, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen != gen || a.bypass {
		return t, nil
	}
	if len(a.entries) >= MaxEntries {
		a.entries = map[keyHash]cached{}
	}
	a.entries[sum] = cached{tenant: t, expires: now.Add(a.ttl)}
	return t, nil
}

// Caching reports whether the cache is in use: false while an attached
// RevocationListener is not listening.
func (a *Authenticator) Caching() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.bypass && a.ttl > 0
}

// forget drops one key (by the SHA-256 of its secret) from the cache.
func (a *Authenticator) forget(h keyHash) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.entries, h)
	a.gen++
}

// forgetAll empties the cache; bypass says whether to use it from now on.
func (a *Authenticator) forgetAll(bypass bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	clear(a.entries)
	a.gen++
	a.bypass = bypass
}
