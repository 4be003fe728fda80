package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/console"
	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/operator"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// The growth step's world (passes.go): its database, built for the step
// and dropped after it, and the backlogs, seeded directly with SQL.

// passesPartitionsSQL gives the step's database what a deliverer and a
// reaper keep: a day partition of the events tables for every day of
// EVENTS_RETENTION (30) and the days ahead, and one day past it, 40 days
// ago, for each of the events tables and idempotency_keys: the expired
// days the retention passes check.
const passesPartitionsSQL = `
SELECT phasepay_ensure_day_partitions(t, c, (phasepay_now() AT TIME ZONE 'UTC')::date - 30, 35),
       phasepay_ensure_day_partitions(t, c, (phasepay_now() AT TIME ZONE 'UTC')::date - 40, 1)
  FROM (VALUES ('events', 'created_at'), ('webhook_deliveries', 'event_created_at'),
               ('webhook_attempts', 'event_created_at')) AS p (t, c)
UNION ALL
SELECT idempotency_keys_ensure_partitions((phasepay_now() AT TIME ZONE 'UTC')::date - 40, 1), 0`

// expiredDaySQL is the start of the expired day (40 days ago, UTC).
const expiredDaySQL = `((phasepay_now() AT TIME ZONE 'UTC')::date - 40)::timestamp AT TIME ZONE 'UTC'`

// seedDeliveriesSQL: events $2..$3 of tenant $1, over the day before the
// last ten minutes, each with a delivery due to endpoint $4.
const seedDeliveriesSQL = `
WITH ev AS (
    INSERT INTO events (tenant_id, id, type, created_at, body)
    SELECT $1, 'evt_hoard_' || g, 'charge.declined', phasepay_now() - interval '10 minutes' - (g % 72000) * interval '1 second', '{}'
      FROM generate_series($2::int, $3::int) g
    RETURNING tenant_id, id, created_at
)
INSERT INTO webhook_deliveries (tenant_id, event_id, event_created_at, endpoint_id, next_attempt_at)
SELECT tenant_id, id, created_at, $4, created_at FROM ev`

// seedKeysSQL: started keys $2..$3 of tenant $1, claimed over the day
// before the last ten minutes (a backlog grows over an outage; what was
// claimed in the last minutes is the request rate, which the console's
// rates read), every other one overdue (its next attempt an hour ago),
// the others waiting for theirs (an hour on).
const seedKeysSQL = `
INSERT INTO idempotency_keys (tenant_id, key, created_at, fingerprint, request_method, request_path, request_body,
                              recovery_point, attempts, next_attempt_at)
SELECT $1, 'hoard-' || g, phasepay_now() - interval '10 minutes' - (g % 72000) * interval '1 second', sha256(int8send(g)),
       'POST', '/v1/charges', '{}', 'started', 3,
       phasepay_now() + CASE WHEN g % 2 = 0 THEN interval '-1 hour' ELSE interval '1 hour' END
  FROM generate_series($2::int, $3::int) g`

// seedExpiredKeysSQL: finished keys $2..$3 of tenant $1 in the expired
// day, each finished a minute after its claim.
const seedExpiredKeysSQL = `
INSERT INTO idempotency_keys (tenant_id, key, created_at, fingerprint, request_method, request_path, request_body,
                              state, recovery_point, response_status, response_content_type, response_body, finished_at)
SELECT $1, 'old-' || g, t, sha256(int8send(g)), 'POST', '/v1/charges', '{}',
       'done', 'done', 201, 'application/json', '{}', t + interval '1 minute'
  FROM generate_series($2::int, $3::int) g,
       LATERAL (SELECT ` + expiredDaySQL + ` + (g % 86000) * interval '1 second' AS t) d`

// seedExpiredDeliveriesSQL: delivered deliveries $2..$3 of tenant $1 in
// the expired day.
const seedExpiredDeliveriesSQL = `
INSERT INTO webhook_deliveries (tenant_id, event_id, event_created_at, endpoint_id, state, attempts, next_attempt_at, finished_at)
SELECT $1, 'evt_old_' || g, t, $4, 'succeeded', 1, t, t + interval '1 second'
  FROM generate_series($2::int, $3::int) g,
       LATERAL (SELECT ` + expiredDaySQL + ` + (g % 86000) * interval '1 second' AS t) d`

// keepersSQL puts in each expired day what keeps it: a key of tenant $1
// finished an hour ago (its client may still retry), a delivery to $2
// still pending.
const keepersSQL = `
WITH k AS (
    INSERT INTO idempotency_keys (tenant_id, key, created_at, fingerprint, request_method, request_path, request_body,
                                  state, recovery_point, response_status, response_content_type, response_body, finished_at)
    VALUES ($1, 'old-late', ` + expiredDaySQL + ` + interval '12 hours', sha256('late'), 'POST', '/v1/charges', '{}',
            'done', 'done', 201, 'application/json', '{}', phasepay_now() - interval '1 hour')
)
INSERT INTO webhook_deliveries (tenant_id, event_id, event_created_at, endpoint_id, next_attempt_at)
VALUES ($1, 'evt_old_pending', ` + expiredDaySQL + ` + interval '12 hours', $2, phasepay_now() + interval '1 hour')`

// timelineKeySQL is a finished key of tenant $1 ($2) whose finish wrote an
// event about its object, with the event at the finish's instant, as a
// charge's would be: what timeline.Read merges.
const timelineKeySQL = `
WITH t AS (SELECT phasepay_now() - interval '1 minute' AS claimed, phasepay_now() - interval '59 seconds' AS finished),
k AS (
    INSERT INTO idempotency_keys (tenant_id, key, created_at, fingerprint, request_method, request_path, request_body,
                                  state, recovery_point, response_status, response_content_type, response_body,
                                  finished_at, object_id, timeline)
    SELECT $1, $2, t.claimed, sha256('timeline'), 'POST', '/v1/charges', '{}', 'done', 'done', 201,
           'application/json', '{}', t.finished, 'ch_timeline',
           jsonb_build_array(jsonb_build_object('at', phasepay_timeline_time(t.claimed), 'kind', 'claimed', 'lock_version', 1),
                             jsonb_build_object('at', phasepay_timeline_time(t.finished), 'kind', 'finished',
                                                'lock_version', 1, 'response_status', 201))
      FROM t
)
INSERT INTO events (tenant_id, id, type, created_at, body)
SELECT $1, 'evt_timeline', 'charge.authorized', t.finished,
       convert_to('{"id":"evt_timeline","object":"event","type":"charge.authorized","data":{"object":{"id":"ch_timeline"}}}', 'UTF8')
  FROM t`

// passesSetup builds the step's world: a database of its own, migrated,
// with its partitions, tenants, endpoints and keepers; a deliverer whose
// endpoints are served in-process (the hoarder's hangs); a console.
func (e *env) passesSetup(ctx context.Context) (w *passesWorld, stop func(), err error) {
	name := e.passesDB()
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return w, stop, err
	}
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return w, stop, err
	}
	w = &passesWorld{attemptDone: make(chan string, 16), seeded: map[string]int{}, recorder: &statementRecorder{}}
	var cleanups []func()
	// stopAll, not stop, and every failure returns w and stop as they
	// stand: the cleanups read w, and a return of nil would clear both
	// before the deferred call runs them.
	stopAll := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
		_, _ = e.admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	stop = stopAll
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	if w.url, err = databaseURL(e.cfg.AdminURL, name); err != nil {
		return w, stop, err
	}
	if out, err := e.run(ctx, "api", map[string]string{"DATABASE_URL": w.url}, "migrate"); err != nil {
		return w, stop, fmt.Errorf("migrate: %w: %s", err, out)
	}
	if w.seed, err = pgxpool.New(ctx, w.url); err != nil {
		return w, stop, err
	}
	cleanups = append(cleanups, w.seed.Close)
	if w.pool, err = passesPool(ctx, w.url, w.recorder); err != nil {
		return w, stop, err
	}
	cleanups = append(cleanups, w.pool.Close)
	if _, err := w.seed.Exec(ctx, passesPartitionsSQL); err != nil {
		return w, stop, fmt.Errorf("partitions: %w", err)
	}
	for name, id := range map[string]*int64{"hoarder": &w.hoarder, "bystander": &w.bystander} {
		if err := w.seed.QueryRow(ctx, `INSERT INTO tenants (name) VALUES ($1) RETURNING id`, name).Scan(id); err != nil {
			return w, stop, err
		}
	}
	hang, err := webhooks.Create(ctx, w.seed, w.hoarder, "http://hang.invalid/hook", []string{"*"})
	if err != nil {
		return w, stop, err
	}
	w.hangID = hang.ID
	if _, err := webhooks.Create(ctx, w.seed, w.hoarder, "http://idle.invalid/hook", []string{"*"}); err != nil {
		return w, stop, err
	}
	by, err := webhooks.Create(ctx, w.seed, w.bystander, "http://bystander.invalid/hook", []string{"*"})
	if err != nil {
		return w, stop, err
	}
	if _, err := w.seed.Exec(ctx, keepersSQL, w.hoarder, w.hangID); err != nil {
		return w, stop, fmt.Errorf("keepers: %w", err)
	}
	w.timelineKey = "timeline-key"
	if _, err := w.seed.Exec(ctx, timelineKeySQL, w.hoarder, w.timelineKey); err != nil {
		return w, stop, fmt.Errorf("timeline key: %w", err)
	}
	if w.keys, err = idempotency.NewStore(idempotency.Config{}); err != nil {
		return w, stop, err
	}

	hangAddr, release := hangingListener()
	w.release = release
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	cleanups = append(cleanups, receiver.Close)
	byAddr := receiver.Listener.Addr().String()
	// The hoarder's attempts hang for the whole step: its endpoint stays
	// at its cap, its backlog due behind it.
	w.deliverer, err = webhooks.NewDeliverer(w.pool, webhooks.DelivererConfig{AllowPrivate: true, Timeout: time.Hour, Lease: 2 * time.Hour,
		Client: dialTo(map[string]string{"hang.invalid": hangAddr, "idle.invalid": byAddr, "bystander.invalid": byAddr})})
	if err != nil {
		return w, stop, err
	}
	w.deliverer.TestAttemptDone = func(r webhooks.Result) {
		if r.EndpointID == by.ID {
			w.attemptDone <- r.EventID
		}
	}
	cleanups = append(cleanups, func() {
		w.release()
		w.wg.Wait()
	})

	desk, err := operator.New(w.pool, operator.Config{PSPURL: "http://psp.invalid"})
	if err != nil {
		return w, stop, err
	}
	cleanups = append(cleanups, func() { _ = desk.Close(context.Background()) })
	const token = "bench-operator-token-0123456789"
	// The console answers only to the address it listens on (its host
	// guard), so the listener comes first.
	hs := httptest.NewUnstartedServer(nil)
	cleanups = append(cleanups, hs.Close)
	srv, err := console.New(console.Config{Pool: w.pool, Desk: desk, Token: token, Addr: hs.Listener.Addr().String()})
	if err != nil {
		return w, stop, err
	}
	hs.Config.Handler = srv.Handler()
	hs.Start()
	if w.console, err = newConsoleClient(ctx, hs.URL, token); err != nil {
		return w, stop, err
	}
	return w, stop, nil
}

// grow adds rows to every backlog up to size, analyzes the tables as
// autovacuum would after such a growth, and, the first time, has the
// deliverer fill the hoarder's endpoint to its cap.
func (w *passesWorld) grow(ctx context.Context, size int) error {
	conn, err := w.seed.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	// Seeding 10⁶ rows runs for a minute: no foreign-key or head triggers.
	if _, err := conn.Exec(ctx, `SET session_replication_role = replica`); err != nil {
		return err
	}
	defer conn.Exec(context.Background(), `RESET session_replication_role`) //nolint:errcheck
	for _, b := range []struct {
		name, sql string
		args      []any
	}{
		{"deliveries", seedDeliveriesSQL, []any{w.hangID}},
		{"keys", seedKeysSQL, nil},
		{"expired keys", seedExpiredKeysSQL, nil},
		{"expired deliveries", seedExpiredDeliveriesSQL, []any{w.hangID}},
	} {
		from := w.seeded[b.name] + 1
		if from > size {
			continue
		}
		args := append([]any{w.hoarder, from, size}, b.args...)
		if b.sql == seedKeysSQL || b.sql == seedExpiredKeysSQL {
			args = args[:3]
		}
		if _, err := conn.Exec(ctx, b.sql, args...); err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		w.seeded[b.name] = size
	}
	if _, err := conn.Exec(ctx, `ANALYZE events, webhook_deliveries, idempotency_keys`); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) webhook_endpoints, tenants`); err != nil {
		return err
	}
	if w.filled {
		return nil
	}
	n, err := w.deliverer.RunOnce(ctx, &w.wg, make(chan struct{}, 1))
	if err != nil {
		return err
	}
	if n != webhooks.PerEndpointDefault {
		return fmt.Errorf("the hoarder's endpoint took %d attempts, not its cap of %d", n, webhooks.PerEndpointDefault)
	}
	w.filled = true
	return nil
}

// consoleClient is an operator logged in to a console.
type consoleClient struct {
	base string
	hc   *http.Client
}

func newConsoleClient(ctx context.Context, base, token string) (*consoleClient, error) {
	jar, err := cookiejar.New(nil)
	if err != nil {
		return nil, err
	}
	c := &consoleClient{base: base, hc: &http.Client{Jar: jar, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/login",
		strings.NewReader(url.Values{"token": {token}}.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return nil, fmt.Errorf("console login: %s", resp.Status)
	}
	return c, nil
}

// get reads a page, all of it.
func (c *consoleClient) get(ctx context.Context, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return errors.New("console " + path + ": " + resp.Status)
	}
	return nil
}

// hangingListener accepts requests and answers none until release.
func hangingListener() (addr string, release func()) {
	released := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-released:
		case <-r.Context().Done():
		}
	}))
	var once sync.Once
	return srv.Listener.Addr().String(), func() {
		once.Do(func() { close(released) })
		srv.Close()
	}
}

// dialTo is an HTTP client that connects to addrs[host] for the hosts it
// names, as a resolver would make it.
func dialTo(addrs map[string]string) *http.Client {
	var d net.Dialer
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, target string) (net.Conn, error) {
			host, _, _ := net.SplitHostPort(target)
			if a, ok := addrs[host]; ok {
				target = a
			}
			return d.DialContext(ctx, network, target)
		},
		MaxIdleConnsPerHost: 8,
	}}
}

// passesPool opens a pool on url as phasepay's processes open theirs
// (dbpool.ConfigurePool: timeouts, one generic plan per statement), whose
// statements rec records.
func passesPool(ctx context.Context, url string, rec *statementRecorder) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	dbpool.ConfigurePool(cfg, url)
	cfg.ConnConfig.Tracer = rec
	cfg.MaxConns = 8
	return pgxpool.NewWithConfig(ctx, cfg)
}

// databaseURL is the admin URL with another database.
func databaseURL(admin, name string) (string, error) {
	u, err := url.Parse(admin)
	if err != nil {
		return "", err
	}
	u.Path = "/" + name
	return u.String(), nil
}
