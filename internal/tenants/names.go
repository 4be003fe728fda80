package tenants

import (
	"context"
	"log/slog"
	"sync"
)

// NameCache names tenants in log lines, as the commands and every other line
// name them, from a cache filled on first use: a tenant's name never changes
// (bin/api keys create names it once), so a background pass that logs about
// many requests of one tenant reads its name once. It is safe for
// concurrent use, and bounded by MaxNames.
type NameCache struct {
	q     DBTX
	max   int
	mu    sync.Mutex
	names map[int64]string
}

// MaxNames bounds a NameCache; past it the cache starts over.
//
// The reaper and the deliverers run for months and meet every tenant that
// ever had a stuck key or an event, so an unbounded cache would grow with
// the tenants ever served. A name read again costs one primary-key lookup.
const MaxNames = 10_000

// NewNameCache returns a cache reading names on q.
func NewNameCache(q DBTX) *NameCache {
	return &NameCache{q: q, max: MaxNames, names: map[int64]string{}}
}

// Name returns the tenant's name, or "" if it cannot be read now.
func (c *NameCache) Name(ctx context.Context, id int64) string {
	c.mu.Lock()
	name, ok := c.names[id]
	c.mu.Unlock()
	if ok {
		return name
	}
	names, err := Names(ctx, c.q, []int64{id})
	if err != nil || names[id] == "" {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.names) >= c.max {
		c.names = map[int64]string{}
	}
	c.names[id] = names[id]
	return names[id]
}

// Attr is a log line's tenant: "tenant" with its name, or "tenant_id" with
// its id when the name cannot be read now, so that a number is never
// logged under the key that names tenants.
func (c *NameCache) Attr(ctx context.Context, id int64) slog.Attr {
	if name := c.Name(ctx, id); name != "" {
		return slog.String("tenant", name)
	}
	return slog.Int64("tenant_id", id)
}
