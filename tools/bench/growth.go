package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// Growth is the cost of a claim and a replay with Keys keys stored.
type Growth struct {
	Keys        int     `json:"existing_keys"`
	ClaimP50    float64 `json:"claim_p50_ms"`
	ClaimP99    float64 `json:"claim_p99_ms"`
	ReplayP50   float64 `json:"replay_p50_ms"`
	SeedSeconds float64 `json:"seed_seconds"`
}

// seedSQL inserts finished keys numbered $2..$3 for tenant $1, spread over
// the days that have partitions (yesterday to two days on), as retention
// would leave them. Foreign-key triggers are off for the seeding session
// (session_replication_role), which halves its time; the tenant exists.
const seedSQL = `
INSERT INTO idempotency_keys (tenant_id, key, created_at, fingerprint, request_method, request_path, request_body,
                              state, recovery_point, response_status, response_content_type, response_body)
SELECT $1, 'seed-' || g,
       date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - interval '1 day'
           + (g % 4) * interval '1 day' + (g % 86000) * interval '1 second',
       sha256(int8send(g)), 'POST', '/v1/charges', '\x7b7d'::bytea,
       'done', 'done', 201, 'application/json', '\x7b7d'::bytea
  FROM generate_series($2::bigint, $3::bigint) g`

func (e *env) seed(ctx context.Context, tenantID int64, from, to int) error {
	if to < from {
		return nil
	}
	// Seeding 10 M keys takes minutes in two statements that report
	// nothing until they end: say every few seconds that it is still going.
	stop := e.heartbeat(seedProgressEvery, func(elapsed time.Duration) {
		e.log("  seeding keys %d..%d: %s so far", from, to, elapsed.Round(time.Second))
	})
	defer stop()
	// Two sessions, one per core.
	mid := from + (to-from)/2
	var (
		wg   sync.WaitGroup
		errs = make([]error, 2)
	)
	for i, r := range [][2]int{{from, mid}, {mid + 1, to}} {
		wg.Go(func() {
			conn, err := e.pool.Acquire(ctx)
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
				errs[i] = err
				return
			}
			defer conn.Exec(context.Background(), `RESET session_replication_role`) //nolint:errcheck
			_, errs[i] = conn.Exec(ctx, seedSQL, tenantID, r[0], r[1])
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err := e.pool.Exec(ctx, `ANALYZE idempotency_keys`)
	return err
}

func (e *env) growth(ctx context.Context, res *Results) error {
	var tenantID int64
	if err := e.pool.QueryRow(ctx, `SELECT id FROM tenants WHERE name = 'bench'`).Scan(&tenantID); err != nil {
		return err
	}
	store, err := idempotency.NewStore(idempotency.Config{})
	if err != nil {
		return err
	}
	base, stop, err := e.startStack(ctx, nil)
	if err != nil {
		return err
	}
	defer stop()

	seeded := 0
	for _, size := range e.cfg.GrowthSizes {
		t0 := time.Now()
		if err := e.seed(ctx, tenantID, seeded+1, size); err != nil {
			return fmt.Errorf("seed %d keys: %w", size, err)
		}
		seedSecs := time.Since(t0).Seconds()
		seeded = max(seeded, size)
		var total int
		if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&total); err != nil {
			return err
		}

		// The claim alone: its lock and its statement, in a transaction
		// rolled back so that nothing changes between sizes.
		canon, _, err := charges.ParseCreateRequest([]byte(visa))
		if err != nil {
			return err
		}
		var claims []time.Duration
		for i := range 2000 {
			t := time.Now()
			tx, err := e.claims.Begin(ctx)
			if err != nil {
				return err
			}
			_, _, err = store.Claim(ctx, tx, idempotency.ClaimParams{TenantID: tenantID, Key: keyf("growth-%d-%d", size, i), Request: canon})
			_ = tx.Rollback(ctx)
			if err != nil {
				return err
			}
			claims = append(claims, time.Since(t))
		}
		cl := summarize(claims)

		// A replay of a finished key, through HTTP, one client.
		r := load(ctx, e.hc, base, e.apiKey, 1, 3*time.Second, http.StatusCreated, func(w, i int) request {
			return request{keyf("commits-false-%d", i%400), []byte(visa)}
		}, nil)
		g := Growth{Keys: total, ClaimP50: cl.P50, ClaimP99: cl.P99, ReplayP50: r.Latency.P50, SeedSeconds: seedSecs}
		res.Growth = append(res.Growth, g)
		e.log("  %d keys stored (seeded in %.0fs): claim p50 %.3f ms, p99 %.3f ms; replay p50 %.2f ms",
			g.Keys, seedSecs, g.ClaimP50, g.ClaimP99, g.ReplayP50)
	}
	return nil
}

// seedProgressEvery is the pause between the seeding's progress lines.
const seedProgressEvery = 10 * time.Second

// heartbeat calls f with the time elapsed every interval until the
// returned stop is called.
func (e *env) heartbeat(every time.Duration, f func(elapsed time.Duration)) (stop func()) {
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				f(time.Since(start))
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}
