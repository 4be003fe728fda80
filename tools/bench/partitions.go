package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
)

// PartitionClaim is the cost of the fast path's two reads with Partitions
// daily partitions attached, each holding RowsPerDay keys.
type PartitionClaim struct {
	Partitions int `json:"partitions"`
	RowsPerDay int `json:"rows_per_day"`
	// ClaimP50 and ClaimP99 time Store.Claim of a new key alone (its
	// transaction is opened before and rolled back after the clock).
	ClaimP50 float64 `json:"claim_p50_ms"`
	ClaimP99 float64 `json:"claim_p99_ms"`
	// LookupP50 times Store.Lookup of a key that does not exist: what
	// the fast path reads before its claim.
	LookupP50 float64 `json:"lookup_miss_p50_ms"`
}

// DropImpact compares claim latency while a partition of Rows keys is
// detached (CONCURRENTLY) and dropped with claim latency just before.
type DropImpact struct {
	Rows         int     `json:"rows"`
	QuietP50     float64 `json:"quiet_claim_p50_ms"`
	QuietP99     float64 `json:"quiet_claim_p99_ms"`
	DuringP50    float64 `json:"during_drop_claim_p50_ms"`
	DuringP99    float64 `json:"during_drop_claim_p99_ms"`
	DuringClaims int     `json:"during_drop_claims"`
	// Ratio is DuringP99 ÷ QuietP99.
	Ratio float64 `json:"p99_ratio"`
}

// claimOnce times one Store.Claim of a new key in a transaction rolled back
// afterwards, so that nothing accumulates between measurements.
func claimOnce(ctx context.Context, pool *pgxpool.Pool, store *idempotency.Store, p idempotency.ClaimParams) (time.Duration, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	t := time.Now()
	if _, _, err := store.Claim(ctx, tx, p); err != nil {
		return 0, err
	}
	return time.Since(t), nil
}

// claimParams is a new charge's claim of key.
func claimParams(tenantID int64, key string) (idempotency.ClaimParams, error) {
	canon, _, err := charges.ParseCreateRequest([]byte(visa))
	if err != nil {
		return idempotency.ClaimParams{}, err
	}
	return idempotency.ClaimParams{TenantID: tenantID, Key: key, Request: canon}, nil
}

func tenantID(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var id int64
	err := pool.QueryRow(ctx, `SELECT id FROM tenants WHERE name = 'bench'`).Scan(&id)
	return id, err
}

// seedDaySQL fills the day starting at $2 with $3 finished keys of tenant $1.
const seedDaySQL = `
INSERT INTO idempotency_keys (tenant_id, key, created_at, fingerprint, request_method, request_path, request_body,
                              state, recovery_point, response_status, response_content_type, response_body)
SELECT $1, 'day-' || to_char($2::timestamptz, 'YYYYMMDD') || '-' || g, $2::timestamptz + (g % 86000) * interval '1 second',
       sha256(int8send(g)), 'POST', '/v1/charges', '\x7b7d'::bytea, 'done', 'done', 201, 'application/json', '\x7b7d'::bytea
  FROM generate_series(1, $3::int) g`

// claimByPartitions measures Claim and a missing Lookup with 1, 7 and 30
// (Config.Partitions) daily partitions, in a database of its own: every
// partition but today's is dropped, then older days are added, each with
// Config.RowsPerDay keys, as retention would keep them.
func (e *env) claimByPartitions(ctx context.Context, res *Results) error {
	pool, err := pgxpool.New(ctx, e.partsURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The claims and lookups timed below run on a pool like the api's.
	api, err := apiPool(ctx, e.partsURL)
	if err != nil {
		return err
	}
	defer api.Close()
	tenant, err := tenantID(ctx, pool)
	if err != nil {
		return err
	}
	store, err := idempotency.NewStore(idempotency.Config{})
	if err != nil {
		return err
	}
	var today time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('day', phasepay_now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`).Scan(&today); err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'idempotency_keys'::regclass AND c.relname <> 'idempotency_keys_p' || to_char($1::timestamptz AT TIME ZONE 'UTC', 'YYYYMMDD')`, today)
	if err != nil {
		return err
	}
	var others []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return err
		}
		others = append(others, n)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, n := range others {
		if _, err := pool.Exec(ctx, `DROP TABLE `+n); err != nil {
			return err
		}
	}
	seeded := map[int]bool{}
	n := 2000
	if e.cfg.Duration < 5*time.Second {
		n = 500
	}
	for _, parts := range e.cfg.Partitions {
		if _, err := pool.Exec(ctx, `SELECT idempotency_keys_ensure_partitions(($1::timestamptz AT TIME ZONE 'UTC')::date - $2::int + 1, $2::int)`, today, parts); err != nil {
			return err
		}
		for d := range parts {
			if seeded[d] {
				continue
			}
			if _, err := pool.Exec(ctx, seedDaySQL, tenant, today.AddDate(0, 0, -d), e.cfg.RowsPerDay); err != nil {
				return fmt.Errorf("seed day -%d: %w", d, err)
			}
			seeded[d] = true
		}
		if _, err := pool.Exec(ctx, `ANALYZE idempotency_keys`); err != nil {
			return err
		}
		var attached int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'idempotency_keys'::regclass`).Scan(&attached); err != nil {
			return err
		}
		var claims, lookups []time.Duration
		for i := range n + 100 { // the first 100 warm the plans up
			p, err := claimParams(tenant, keyf("parts-%d-%d", parts, i))
			if err != nil {
				return err
			}
			t := time.Now()
			if _, err := store.Lookup(ctx, api, tenant, p.Key); err == nil {
				return fmt.Errorf("lookup of %q found a key", p.Key)
			}
			l := time.Since(t)
			c, err := claimOnce(ctx, api, store, p)
			if err != nil {
				return err
			}
			if i >= 100 {
				claims, lookups = append(claims, c), append(lookups, l)
			}
		}
		cl, lk := summarize(claims), summarize(lookups)
		pc := PartitionClaim{Partitions: attached, RowsPerDay: e.cfg.RowsPerDay, ClaimP50: cl.P50, ClaimP99: cl.P99, LookupP50: lk.P50}
		res.ClaimByPartitions = append(res.ClaimByPartitions, pc)
		e.log("  %2d partitions: claim p50 %.3f ms, p99 %.3f ms; missing lookup p50 %.3f ms", attached, cl.P50, cl.P99, lk.P50)
	}
	return nil
}

// claimLoop claims new keys one after the other until stop is closed and
// returns their latencies.
func claimLoop(ctx context.Context, pool *pgxpool.Pool, tenant int64, prefix string, stop <-chan struct{}) ([]time.Duration, error) {
	store, err := idempotency.NewStore(idempotency.Config{})
	if err != nil {
		return nil, err
	}
	var out []time.Duration
	for i := 0; ; i++ {
		select {
		case <-stop:
			return out, nil
		default:
		}
		p, err := claimParams(tenant, keyf("%s-%d", prefix, i))
		if err != nil {
			return nil, err
		}
		d, err := claimOnce(ctx, pool, store, p)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
}

// measureClaimsWhile runs claimLoop while f runs (and for at least min),
// returning the claims' latencies and f's error.
func measureClaimsWhile(ctx context.Context, pool *pgxpool.Pool, tenant int64, prefix string, atLeast time.Duration, f func() error) ([]time.Duration, error) {
	stop := make(chan struct{})
	var (
		wg     sync.WaitGroup
		lat    []time.Duration
		errLat error
	)
	wg.Go(func() { lat, errLat = claimLoop(ctx, pool, tenant, prefix, stop) })
	t := time.Now()
	err := f()
	if rest := atLeast - time.Since(t); rest > 0 {
		time.Sleep(rest)
	}
	close(stop)
	wg.Wait()
	if err != nil {
		return nil, err
	}
	return lat, errLat
}

// otlpSink accepts OTLP/HTTP trace exports and counts them: the exporter's
// whole cost on the api's side, without a collector's on ours.
type otlpSink struct {
	*httptest.Server
	spans atomic.Int64
}

func startOTLPSink() (*otlpSink, error) {
	s := &otlpSink{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" {
			s.spans.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	return s, nil
}
