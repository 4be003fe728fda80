package chaos

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/testutil/pgcluster"
	"github.com/phasepay/phasepay/tools/procs"
)

// dbChaos takes the database away from the running api and reaper
// processes: it stops the run's own cluster immediately (as a crash
// would), keeps it down a few seconds, and starts it again, Config.DBRestarts
// times spread over the load. After each start it checks that every
// process came back by itself within Config.RecoverWithin: every api
// answers /readyz 200, and every reaper has connected again (seen in
// pg_stat_activity under its application_name, which a restart empties).
// A process that exits instead is caught by the supervisor (an unplanned
// exit); one that stays up but never recovers is caught here.
type dbChaos struct {
	cluster *pgcluster.Cluster
	cfg     *Config
	rnd     *rand.Rand
	dbURL   string   // the run's database, for the harness's own checks
	bases   []string // the api workers' base URLs, by worker index
	reapers []string // the reapers' application names
	rec     *recorder

	restarts atomic.Int64
	// recovering is set from the database's start until every process has
	// recovered: the chaos controller kills and pauses no worker meanwhile,
	// so a slow recovery is the processes' own and not the harness's
	// doing. Workers killed while the database was down still have to
	// start against a database that is away, and recover from that.
	recovering atomic.Bool

	mu          sync.Mutex
	down        time.Duration // total time the database was down
	windows     []downWindow  // each restart, from the stop until every process recovered
	maxRecovery time.Duration
	violations  []string
	failovers   []FailoverStat // with a formation (failover.go)

	// primaryDown, with a formation and several PSPs, takes the route's
	// first PSP down and returns what brings it back (failover.go).
	primaryDown func(ctx context.Context) (restore func(until time.Time))
}

// run performs the restarts. The k-th of n waits until k/(n+1) of the
// intents are final, so every restart falls in the middle of the load
// however fast the run goes, and the last one still has intents after it.
// It returns an error only when the cluster itself cannot be restarted.
func (d *dbChaos) run(ctx context.Context, finished *atomic.Int64, clientsDone <-chan struct{}, progress io.Writer) error {
	n, what := d.cfg.DBRestarts, "database restart"
	if d.cfg.Formation != nil {
		n, what = d.cfg.Failovers, "failover"
	}
	for k := 1; k <= n; k++ {
		threshold := int64(k * d.cfg.Intents / (n + 1))
		for finished.Load() < threshold {
			select {
			case <-ctx.Done():
				return nil
			case <-clientsDone:
				d.violate("only %d of %d %ss happened during the load: the intents finished first", k-1, n, what)
				return nil
			case <-time.After(50 * time.Millisecond):
			}
		}
		if d.cfg.Formation != nil {
			if err := d.runFailover(ctx, k, n, progress); err != nil {
				return err
			}
			continue
		}
		down := time.Duration(float64(d.cfg.DBDown) * (0.5 + d.rnd.Float64()))
		stopped := time.Now()
		started := d.rec.Begin("db_down", "postgres", fmt.Sprintf("restart %d of %d: stopped immediately, started again", k, n))
		if err := d.cluster.Stop(); err != nil {
			return fmt.Errorf("database restart %d: %w", k, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(down):
		}
		if err := d.cluster.Start(ctx); err != nil {
			return fmt.Errorf("database restart %d: %w", k, err)
		}
		up := time.Now()
		started()
		d.restarts.Add(1)
		d.recovering.Store(true)
		recovered := d.rec.Begin("db_recovery", "every api and reaper", "until every api answers /readyz 200 and every reaper reconnected")
		rec, notRecovered, last := d.awaitRecovery(ctx, up)
		recovered()
		d.recovering.Store(false)
		d.mu.Lock()
		d.down += up.Sub(stopped)
		d.windows = append(d.windows, downWindow{from: stopped, to: up.Add(rec)})
		d.maxRecovery = max(d.maxRecovery, rec)
		d.mu.Unlock()
		if len(notRecovered) > 0 {
			d.violate("database restart %d: not recovered %s after the database was back: %s",
				k, d.cfg.RecoverWithin, strings.Join(notRecovered, "; "))
		}
		if progress != nil {
			verdict := fmt.Sprintf("every process recovered in %s", rec.Truncate(time.Millisecond))
			if len(last) > 0 {
				verdict += fmt.Sprintf(" (the last waited for: %s)", strings.Join(last, "; "))
			}
			if len(notRecovered) > 0 {
				verdict = fmt.Sprintf("NOT every process recovered within %s", d.cfg.RecoverWithin)
			}
			fmt.Fprintf(progress, "database restart %d/%d: down %s, %s\n", k, n, up.Sub(stopped).Truncate(time.Millisecond), verdict)
		}
	}
	return nil
}

// downWindows returns the restarts so far, each from the stop until
// every process recovered.
func (d *dbChaos) downWindows() []downWindow {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.windows)
}

// awaitRecovery polls until every api is ready and every reaper connected,
// or RecoverWithin passes; it returns how long that took, what was still
// missing if it did not happen, and otherwise what was missing last (the
// slowest to recover, for the progress line).
func (d *dbChaos) awaitRecovery(ctx context.Context, up time.Time) (took time.Duration, missing, last []string) {
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	for {
		missing = nil
		for i, base := range d.bases {
			if status, err := getStatus(ctx, hc, base+"/readyz"); status != http.StatusOK {
				missing = append(missing, fmt.Sprintf("api-%d /readyz: %d %v", i, status, err))
			}
		}
		connected, err := d.applicationNames(ctx)
		for _, name := range d.reapers {
			if !slices.Contains(connected, name) {
				missing = append(missing, fmt.Sprintf("%s has no connection to the database (pg_stat_activity: %v, %v)", name, connected, err))
			}
		}
		took = time.Since(up)
		if len(missing) == 0 || ctx.Err() != nil || took > d.cfg.RecoverWithin {
			return took, missing, last
		}
		last = missing
		time.Sleep(100 * time.Millisecond)
	}
}

// applicationNames lists who is connected to the run's database now, on a
// connection of its own (a pooled one may be a casualty of the restart).
func (d *dbChaos) applicationNames(ctx context.Context) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, procs.WithApplicationName(d.dbURL, "chaos-harness"))
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT DISTINCT application_name FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (d *dbChaos) violate(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.violations = append(d.violations, fmt.Sprintf(format, args...))
}

func getStatus(ctx context.Context, hc *http.Client, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
