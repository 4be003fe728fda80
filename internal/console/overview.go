package console

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/console/plot"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// The overview: how fast requests start and end and how, what is in
// flight, due or waiting for an operator, what webhooks wait, how the PSPs
// answer, and how big the partitions are and when they go.

// rateWindow is the span the overview's rates are measured over, in
// rateBuckets buckets.
const (
	rateWindow  = time.Minute
	rateBuckets = 12
)

// rateScan bounds how far back the rates look for requests: a request
// claimed more than this before it ended (one the reapers finished after
// a long outage) is not counted among the ends. It keeps the read to the
// last moments of each tenant's keys.
const rateScan = 2 * rateWindow

// ratesSQL counts, for each bucket of $1 µs back from now (0 the most
// recent), the requests claimed in it and those that ended in it, by how
// they ended (their stored answer's status class). Each tenant's recent
// keys are read through idempotency_keys_tenant_created, newest first,
// and nothing older than $2 µs: there is no index on created_at alone
// (every index of idempotency_keys leads with tenant_id), and the
// console must not make the database read today's every key each time a
// page refreshes. It is sent with its values (simple protocol): a generic
// plan cannot tell how few keys "created_at > now − $2" holds, took it for
// a third of them, and hashed the tenants against a sequential scan of the
// day's every key (pitfall Q9 "A backlog every pass reads again").
const ratesSQL = `
WITH k AS MATERIALIZED (
    SELECT r.created_at, r.finished_at, r.response_status
      FROM tenants t
     CROSS JOIN LATERAL (
           SELECT created_at, finished_at, response_status FROM idempotency_keys
            WHERE tenant_id = t.id AND created_at > phasepay_now() - $2 * interval '1 microsecond') r
)
SELECT 'started', floor(extract(epoch FROM phasepay_now() - created_at) * 1000000 / $1)::int AS bucket, count(*)
  FROM k WHERE created_at > phasepay_now() - $3 * interval '1 microsecond'
 GROUP BY bucket
UNION ALL
SELECT CASE WHEN response_status < 300 THEN 'succeeded'
            WHEN response_status = 402 THEN 'payment_failed'
            WHEN response_status < 500 THEN 'refused'
            ELSE 'server_error' END AS outcome,
       floor(extract(epoch FROM phasepay_now() - finished_at) * 1000000 / $1)::int AS bucket, count(*)
  FROM k WHERE finished_at > phasepay_now() - $3 * interval '1 microsecond'
 GROUP BY outcome, bucket`

// outcomes are the rows of the rates, in order, with what each means.
var outcomes = []struct{ name, label string }{
	{"started", "claimed (new requests)"},
	{"succeeded", "ended 2xx"},
	{"payment_failed", "ended 402 (declined or failed)"},
	{"refused", "ended 4xx (refused)"},
	{"server_error", "ended 5xx"},
}

// rate is one outcome's requests per second over the window, and per
// bucket (oldest first) for its sparkline.
type rate struct {
	Outcome, Label string
	PerSecond      float64
	Buckets        []float64
	Points         string
}

type overviewData struct {
	Window     time.Duration
	Rates      []rate
	Census     idempotency.Census
	Backlog    webhooks.BacklogStats
	PSPs       []pspHealth
	Partitions []partitionDay
}

func (s *Server) overview(r *http.Request) (view, error) {
	ctx := r.Context()
	var d overviewData
	var err error
	d.Window = rateWindow
	if d.Rates, err = s.rates(ctx); err != nil {
		return view{}, err
	}
	// Due means due now: a grace of zero counts every started key without
	// a lease whose next attempt has come as "overdue".
	if d.Census, err = s.keys().TakeCensus(ctx, s.cfg.Pool, 0); err != nil {
		return view{}, err
	}
	if d.Backlog, err = webhooks.Backlog(ctx, s.cfg.Pool); err != nil {
		return view{}, err
	}
	if d.PSPs, err = s.pspHealth(ctx); err != nil {
		return view{}, err
	}
	if d.Partitions, err = s.partitions(ctx); err != nil {
		return view{}, err
	}
	return view{template: "overview", page: page{Title: "Overview", Nav: "overview", Live: true, Data: d}}, nil
}

func (s *Server) rates(ctx context.Context) ([]rate, error) {
	bucket := rateWindow / rateBuckets
	rows, err := s.cfg.Pool.Query(ctx, ratesSQL, pgx.QueryExecModeSimpleProtocol,
		bucket.Microseconds(), rateScan.Microseconds(), rateWindow.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("rates: %w", err)
	}
	counts := map[string][]float64{}
	var (
		outcome string
		b       int
		n       int64
	)
	_, err = pgx.ForEachRow(rows, []any{&outcome, &b, &n}, func() error {
		if b < 0 || b >= rateBuckets {
			return nil
		}
		if counts[outcome] == nil {
			counts[outcome] = make([]float64, rateBuckets)
		}
		counts[outcome][rateBuckets-1-b] += float64(n) // oldest first
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("rates: %w", err)
	}
	peak := 1.0
	for _, c := range counts {
		peak = max(peak, slices.Max(c))
	}
	out := make([]rate, 0, len(outcomes))
	for _, o := range outcomes {
		c := counts[o.name]
		if c == nil {
			c = make([]float64, rateBuckets)
		}
		total := 0.0
		xs, ys := make([]float64, len(c)), make([]float64, len(c))
		for i, v := range c {
			total += v
			xs[i] = plot.Scale{D0: 0, D1: rateBuckets - 1, R0: 2, R1: 118}.At(float64(i))
			ys[i] = plot.Scale{D0: 0, D1: peak, R0: 22, R1: 2}.At(v)
		}
		out = append(out, rate{Outcome: o.name, Label: o.label, PerSecond: total / rateWindow.Seconds(), Buckets: c, Points: plot.Points(xs, ys)})
	}
	return out, nil
}

// keys is an idempotency store for reads (its configuration matters only
// to claims and leases).
func (s *Server) keys() *idempotency.Store {
	st, _ := idempotency.NewStore(idempotency.Config{}) // the zero config is valid
	return st
}
