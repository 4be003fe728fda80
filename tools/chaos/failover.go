package chaos

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/dbpool"
	"github.com/phasepay/phasepay/tools/formation"
	"github.com/phasepay/phasepay/tools/procs"
)

// Failovers as the run's database fault (Config.Formation): instead of a
// cluster of the run's own that is stopped and started, a pg_auto_failover
// formation whose primary fails, kill -9 and planned switchover in turn,
// while every api and reaper runs on its multi-host URL and must follow the
// primary without being restarted. Per failover, the run measures how long
// until a write succeeds again (a probe writing through a pool configured
// as every phasepay process's is), how many requests were answered 503 and
// 500 meanwhile, and how long until every process was back.

// FailoverStat is one failover and what the run saw of it.
type FailoverStat struct {
	formation.Failover
	// PromotedAfter is seconds from the failure to the monitor reporting
	// the new primary; WritesBackAfter, how long the probe's writes failed
	// (writeProbe.writesBack);
	// RecoveredAfter, to every api ready and every reaper connected again.
	// WritesBackAfter counts from the first write that failed (a
	// switchover keeps the old primary writable for a moment).
	PromotedAfter   float64 `json:"promoted_after_s"`
	WritesBackAfter float64 `json:"writes_back_after_s"`
	RecoveredAfter  float64 `json:"every_process_back_after_s"`
	// Answered503 and Answered500 count the attempts (intents' and lives')
	// answered 503 or 500 from this failure to the next one (or the end).
	Answered503 int `json:"answered_503"`
	Answered500 int `json:"answered_500"`
}

// FailoverSummary is the failovers of a run in a few numbers.
type FailoverSummary struct {
	Replication string `json:"replication"` // synchronous or asynchronous
	Kills       int    `json:"kills"`
	Switchovers int    `json:"switchovers"`
	WritesBack  struct {
		P50 float64 `json:"p50_s"`
		Max float64 `json:"max_s"`
	} `json:"writes_back"`
	Answered503 int            `json:"answered_503"`
	Answered500 int            `json:"answered_500"`
	Failovers   []FailoverStat `json:"failovers"`
	// Losses: what the promotions lost (losses.go), filled after verify.
	Losses *Losses `json:"losses,omitempty"`
}

// answerLog records when attempts were answered 5xx, for the failovers'
// windows.
type answerLog struct {
	mu      sync.Mutex
	answers []answerAt
}

type answerAt struct {
	at     time.Time
	status int
}

func (l *answerLog) add(status int) {
	if status < 500 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answers = append(l.answers, answerAt{time.Now(), status})
}

// count returns the attempts answered status in [from, to).
func (l *answerLog) count(status int, from, to time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, a := range l.answers {
		if a.status == status && !a.at.Before(from) && a.at.Before(to) {
			n++
		}
	}
	return n
}

// writeProbe writes a row every 100 ms through a pool configured as every
// phasepay process's (dbpool.ConfigurePool: connect timeout, statement
// timeout, read-only connections closed) on the multi-host URL, and
// records each attempt.
type writeProbe struct {
	mu       sync.Mutex
	attempts []probeAttempt
}

type probeAttempt struct {
	start, end time.Time
	ok         bool
}

const probeTableSQL = `CREATE TABLE IF NOT EXISTS chaos_write_probe (at timestamptz NOT NULL DEFAULT now())`

func (p *writeProbe) run(ctx context.Context, dbURL string) error {
	cfg, err := pgxpool.ParseConfig(procs.WithApplicationName(dbURL, "chaos-write-probe"))
	if err != nil {
		return err
	}
	dbpool.ConfigurePool(cfg, dbURL)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, probeTableSQL); err != nil {
		pool.Close()
		return fmt.Errorf("write probe: %w", err)
	}
	go func() {
		defer pool.Close()
		for ctx.Err() == nil {
			start := time.Now()
			actx, cancel := context.WithTimeout(ctx, time.Second)
			_, err := pool.Exec(actx, `INSERT INTO chaos_write_probe DEFAULT VALUES`)
			cancel()
			p.mu.Lock()
			p.attempts = append(p.attempts, probeAttempt{start, time.Now(), err == nil})
			p.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return nil
}

// writesBack returns how long writes failed in [from, to): from the start
// of the first write that failed in it to the end of the first one started
// after that which succeeded; 0 if none failed (a switchover drains the
// old primary only some time after it was asked to), false if none
// succeeded again.
func (p *writeProbe) writesBack(from, to time.Time) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var failed *probeAttempt
	for i, a := range p.attempts {
		switch {
		case a.start.Before(from):
		case failed == nil && !a.ok && a.start.Before(to):
			failed = &p.attempts[i]
		case failed != nil && a.ok:
			return a.end.Sub(failed.start), true
		}
	}
	return 0, failed == nil
}

// breakerAcrossKill is how long the route's first PSP stays down after
// the promotion that ends a kill: past every process's way back, and past
// the breakers' cool-down, so that they are open while the retries arrive.
const breakerAcrossKill = 5 * time.Second

// primaryDown takes the route's first PSP down (503 to everything) from the
// moment a kill's primary dies until restore's time. With asynchronous
// replication the kill lost the claims, charges and attempts its last
// second committed, some of them after the PSP authorized them. The calls
// still in flight at the crash, and the first ones after the promotion,
// fail at the first PSP and open every process's breaker for it; the lost
// requests' retries then arrive as new requests. A retry that goes to the
// next PSP authorizes the same charge a second time (a second PSP after a
// lost claim), which the history's check of the books reports.
func (s *pspSet) primaryDown(ctx context.Context) (restore func(until time.Time)) {
	out := &pspOutages{pspURL: s.urls[0]}
	down := faults{ErrorRate: 1, LookupErrorRate: 1, LatencyMS: s.cfg.LatencyMS}
	if err := out.set(ctx, down); err != nil {
		return func(time.Time) {}
	}
	ended := s.rec.Begin("psp_down", s.names[0], fmt.Sprintf("%s down from the kill until %s after the promotion: every breaker for it opens", s.names[0], breakerAcrossKill))
	return func(until time.Time) {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(until)):
		}
		_ = out.set(context.WithoutCancel(ctx), faults{ErrorRate: s.cfg.ErrorRate, DropRate: s.cfg.DropRate, RejectRate: s.cfg.RejectRate,
			LookupErrorRate: s.cfg.LookupErrorRate, LatencyMS: s.cfg.LatencyMS})
		ended()
		s.mu.Lock()
		s.stats.Stretches["down"]++
		s.mu.Unlock()
	}
}

// failover makes the k-th failure of the primary: odd ones kill -9, even
// ones a switchover, each from a healthy formation (the node that failed
// last has rejoined as a standby).
//
// killed is called as soon as a kill's primary is dead.
func (d *dbChaos) failover(ctx context.Context, k int, killed func()) (formation.Failover, error) {
	f := d.cfg.Formation
	if err := f.WaitHealthy(ctx); err != nil {
		return formation.Failover{}, err
	}
	if k%2 == 1 {
		return f.Kill(ctx, formation.KillOptions{Lag: d.cfg.FailoverLag, Killed: killed})
	}
	return f.Switchover(ctx)
}

// failoverSummary fills the failovers' windows and numbers once the load
// is over.
func (h *harness) failoverSummary() *FailoverSummary {
	if h.cfg.Formation == nil {
		return nil
	}
	h.db.mu.Lock()
	stats := slices.Clone(h.db.failovers)
	h.db.mu.Unlock()
	fs := &FailoverSummary{Replication: "synchronous"}
	if h.cfg.Formation.Async() {
		fs.Replication = "asynchronous"
	}
	var back []float64
	for i := range stats {
		s := &stats[i]
		end := time.Now()
		if i+1 < len(stats) {
			end = stats[i+1].Started
		}
		if d, ok := h.probe.writesBack(s.Started, end); ok {
			s.WritesBackAfter = seconds(d)
			back = append(back, s.WritesBackAfter)
		} else {
			h.sum.Violations = append(h.sum.Violations, fmt.Sprintf("failover %d (%s): no write succeeded after it", i+1, s.Kind))
		}
		s.Answered503 = h.answers5xx.count(503, s.Started, end)
		s.Answered500 = h.answers5xx.count(500, s.Started, end)
		fs.Answered503 += s.Answered503
		fs.Answered500 += s.Answered500
		if s.Kind == "kill" {
			fs.Kills++
		} else {
			fs.Switchovers++
		}
	}
	fs.Failovers = stats
	if len(back) > 0 {
		slices.Sort(back)
		fs.WritesBack.P50 = back[(len(back)-1)/2]
		fs.WritesBack.Max = back[len(back)-1]
	}
	return fs
}

func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// failoverRows renders the failovers' rows of the summary table.
func (s *Summary) failoverRows(row func(string, any)) {
	f := s.Failover
	if f == nil {
		return
	}
	row("replication", f.Replication)
	row("failovers: kill -9 / switchover", fmt.Sprintf("%d / %d", f.Kills, f.Switchovers))
	for i, st := range f.Failovers {
		row(fmt.Sprintf("  %d %s %s→%s", i+1, st.Kind, st.From, st.To),
			fmt.Sprintf("promoted %.1fs, writes %.1fs, all back %.1fs, 503 %d, 500 %d, WAL unreplicated %d B",
				st.PromotedAfter, st.WritesBackAfter, st.RecoveredAfter, st.Answered503, st.Answered500, st.Unreplicated))
	}
	row("writes back after: p50 / max", fmt.Sprintf("%.1fs / %.1fs", f.WritesBack.P50, f.WritesBack.Max))
	row("answered 503 / 500", fmt.Sprintf("%d / %d", f.Answered503, f.Answered500))
	if l := f.Losses; l != nil {
		row("PSP authorizations, charge lost", l.UnknownAuthorizations)
		row("  double charges (retried)", l.DoubleCharges)
		row("  orphans (answered, not retried)", l.Orphans)
		for _, kind := range slices.Sorted(maps.Keys(l.Violations)) {
			row("  "+kind, l.Violations[kind])
		}
	}
}

// runFailover makes the k-th of n failovers and waits for every process
// to be back, as run does after a restart.
func (d *dbChaos) runFailover(ctx context.Context, k, n int, progress io.Writer) error {
	var restore func(until time.Time)
	fo, err := d.failover(ctx, k, func() {
		if d.primaryDown != nil {
			restore = d.primaryDown(ctx)
		}
	})
	if err != nil {
		if restore != nil {
			restore(time.Now())
		}
		return fmt.Errorf("failover %d: %w", k, err)
	}
	d.restarts.Add(1)
	d.recovering.Store(true)
	rec, notRecovered, last := d.awaitRecovery(ctx, fo.Started)
	d.recovering.Store(false)
	if restore != nil {
		restore(fo.Promoted.Add(breakerAcrossKill))
	}
	// On the report's time axis: the primary's failure until the standby
	// took writes, and every process's way back.
	d.rec.Span("failover", fo.From, fmt.Sprintf("failover %d of %d (%s): %s → %s", k, n, fo.Kind, fo.From, fo.To), fo.Started, fo.Promoted)
	d.rec.Span("db_recovery", "every api and reaper", "until every api answers /readyz 200 and every reaper reconnected",
		fo.Started, fo.Started.Add(rec))
	st := FailoverStat{Failover: fo, PromotedAfter: seconds(fo.Promoted.Sub(fo.Started)), RecoveredAfter: seconds(rec)}
	d.mu.Lock()
	d.failovers = append(d.failovers, st)
	d.down += fo.Promoted.Sub(fo.Started)
	// A failover is a database outage to the webhook check as a restart
	// is: events committed just before it wait for the promotion and the
	// processes' way back, which no delivery design can beat.
	d.windows = append(d.windows, downWindow{from: fo.Started, to: fo.Started.Add(rec)})
	d.maxRecovery = max(d.maxRecovery, rec)
	d.mu.Unlock()
	if len(notRecovered) > 0 {
		d.violate("failover %d (%s): not recovered %s after it: %s", k, fo.Kind, d.cfg.RecoverWithin, strings.Join(notRecovered, "; "))
	}
	if progress != nil {
		verdict := fmt.Sprintf("every process back %s after the failure", rec.Truncate(time.Millisecond))
		if len(last) > 0 {
			verdict += fmt.Sprintf(" (the last waited for: %s)", strings.Join(last, "; "))
		}
		if len(notRecovered) > 0 {
			verdict = fmt.Sprintf("NOT every process back within %s", d.cfg.RecoverWithin)
		}
		fmt.Fprintf(progress, "failover %d/%d: %s %s → %s, promoted after %s, %s\n", k, n, fo.Kind, fo.From, fo.To,
			fo.Promoted.Sub(fo.Started).Truncate(time.Millisecond), verdict)
	}
	return nil
}
