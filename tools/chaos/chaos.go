// Package chaos is phasepay's chaos harness: it starts a mock PSP injecting
// faults, several API workers and reapers on one fresh database, drives many
// charge intents through the retrying client from concurrent goroutines
// spread over the workers, and meanwhile SIGKILLs and SIGSTOP/SIGCONTs
// random workers (and, in binaries built with the chaos tag, crashes them at
// every phase boundary) and, on a PostgreSQL cluster of its own, stops the
// database immediately and starts it again. At the end it checks, from the
// database and the PSP's own ledger, that every intent was done exactly
// once, and that no api or reaper exited except when the harness killed it.
//
// It is honest (a deliberately broken build makes it report violations:
// see TestHarnessCatchesFreshPSPKeyDefect), repeatable (every random choice
// is drawn from Config.Seed; timing is not) and prints a summary table.
package chaos

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/tools/chaos/history"
	"github.com/phasepay/phasepay/tools/formation"
)

// Config configures a run. Zero fields take the defaults noted.
type Config struct {
	// Seed draws every random choice: intents, fault rolls, crash points,
	// which worker to kill or pause and when. Default 1.
	Seed uint64
	// Intents is how many charge intents are driven. Default 200.
	Intents int
	// Concurrency is how many intents are in flight at once. Default 16.
	Concurrency int
	// Workers is how many bin/api processes serve. Default 3. Worker 0
	// commits every phase separately (ONE_COMMIT_PER_PHASE), so that
	// every recovery point is a commit boundary some worker crashes at.
	Workers int
	// Reapers is how many bin/reaper processes run. Default 2.
	Reapers int
	// ChaosInterval is the mean pause between kills or pauses. Default 400ms.
	ChaosInterval time.Duration
	// Lease is LEASE for every process. Default 2s.
	Lease time.Duration
	// ErrorRate, DropRate and LatencyMS are the mock PSP's faults.
	// Defaults 0.05, 0.05, 5.
	ErrorRate, DropRate float64
	LatencyMS           int
	// RejectRate is the mock's rate of final failures (400 without
	// acting), which end a charge as failed. Default 0.03.
	RejectRate float64
	// LookupErrorRate is the mock's rate of failed lookups by reference
	// (503), which leave an unknown outcome for the retry schedule.
	// Default 0.1.
	LookupErrorRate float64
	// KeyTTL is MOCKPSP_KEY_TTL: how long the mock remembers a key. Short,
	// so that a lost answer is often resolved after the PSP forgot the key,
	// where only the lookup before a resend prevents a second
	// authorization. Default 2s.
	KeyTTL time.Duration
	// Outages is how many times the PSP goes down entirely (error_rate 1,
	// lookups too) during the load; each lasts between OutageLength and
	// twice that, and the next starts OutageGap (drawn between half and one
	// and a half times it) after the last one ended. Default 0.
	Outages int
	// OutageLength is the shortest outage. Default twice KeyTTL, so that
	// every outage outlasts the PSP's memory of the keys it interrupts.
	OutageLength time.Duration
	// OutageGap is the mean time between outages. Default 5s.
	OutageGap time.Duration
	// LongOutage, if set, adds one outage this long among the others:
	// longer than GiveUpAfter, it makes the requests it catches
	// needs_attention (503 payment_unresolved, a reason in last_error).
	LongOutage time.Duration
	// RetryBase, RetryMax and GiveUpAfter are every process's retry
	// schedule (RETRY_BASE, RETRY_MAX, GIVE_UP_AFTER). Defaults 100ms, 2s,
	// 30s.
	RetryBase, RetryMax, GiveUpAfter time.Duration
	// CrashProbability is the chance a worker crashes at each crash point
	// it passes (chaos builds only). Default 0.02.
	CrashProbability float64
	// BinDir holds api, reaper and mockpsp built by Build.
	BinDir string
	// Defect, if set, runs the api workers and reapers with a deliberate
	// defect (internal/testutil/faults: DefectFreshPSPKey,
	// DefectFailoverOnUnknown), to show that the harness catches what it
	// breaks.
	Defect string
	// AdminURL is a PostgreSQL connection string on which the run creates
	// (and afterwards drops) a fresh database. Unused when DBRestarts > 0.
	AdminURL string
	// DBRestarts is how many times PostgreSQL is stopped immediately (as a
	// crash would) and started again during the load. 0: none, and the run
	// uses a database on AdminURL. Otherwise the run creates a throw-away
	// cluster of its own (internal/testutil/pgcluster, binaries in PGBinDir) and
	// removes it at the end: a server other processes use is never
	// restarted.
	DBRestarts int
	// DBDown is the mean time the database stays down per restart (drawn
	// between half and one and a half times it). Default 3s.
	DBDown time.Duration
	// RecoverWithin bounds how long after the database is back every api
	// must answer /readyz 200 and every reaper be connected again, without
	// being restarted. Default 20s.
	RecoverWithin time.Duration
	// PGBinDir holds initdb and postgres for the throw-away cluster.
	// Default: pgcluster's ($PGCLUSTER_BIN, else PostgreSQL 15's on Debian).
	PGBinDir string
	// MaxElapsed bounds each intent's retries. Default 2m.
	MaxElapsed time.Duration
	// Progress, if set, receives a progress line every ProgressEvery.
	Progress      io.Writer
	ProgressEvery time.Duration
	// WebhookFaults are the webhook sink's own faults (webhooksink.go).
	WebhookFaults SinkFaults
	// WebhookDrainWithin bounds how long after the load every event must
	// have been delivered to the sink. Default 2m.
	WebhookDrainWithin time.Duration
	// KeepDatabase leaves the run's database on AdminURL for inspection.
	// A throw-away cluster (DBRestarts > 0) is always removed.
	KeepDatabase bool
	// PSPs, above 1, routes between that many mock PSPs (routing.go), one
	// of them down, refusing or dropping answers for stretches. Default 1.
	PSPs int
	// Stripe, if set, runs the PSP in Stripe's dialect instead of the
	// mock's (stripe.go): a stand-in speaking Stripe's wire format with
	// Stripe's semantics, the processes on PSP_URL=stripe+http://….
	Stripe *StripeDialect
	// Pooler puts a PgBouncer in transaction mode (internal/testutil/pgbouncer)
	// between the api workers and reapers and the database: they run with
	// DATABASE_POOLER=transaction, the even-numbered ones with a direct
	// connection for LISTEN (DATABASE_DIRECT_URL), the odd ones polling.
	// The harness's own checks read the database directly. With database
	// restarts, the pooler stays up and reconnects; a reaper's recovery is
	// then seen by the reaper probe alone (its connections are the
	// pooler's, not its own, in pg_stat_activity).
	Pooler bool
	// Formation, if set, is a pg_auto_failover formation
	// (tools/formation) the run uses instead of a database of its own:
	// every process gets its multi-host URL, and its primary fails
	// Failovers times during the load, kill -9 and planned switchover in
	// turn (failover.go); DBRestarts and AdminURL are not used.
	Formation *formation.Formation
	Failovers int
	// FailoverLag is how long the standby's WAL receiver is held stopped
	// before each kill (formation.KillOptions.Lag): the replication lag
	// the crash meets. 0: none.
	FailoverLag time.Duration
	// HistoryFile, if set, is where the run writes every client request
	// and its answer (gzipped JSON lines, tools/chaos/history) and,
	// when Porcupine rejects some keys, its drawing of them beside it
	// (VisualizationPath).
	HistoryFile string
}

func (c *Config) defaults() {
	c.Seed = cmp.Or(c.Seed, 1)
	c.Intents = cmp.Or(c.Intents, 200)
	c.Concurrency = cmp.Or(c.Concurrency, 16)
	c.Workers = cmp.Or(c.Workers, 3)
	c.Reapers = cmp.Or(c.Reapers, 2)
	c.ChaosInterval = cmp.Or(c.ChaosInterval, 400*time.Millisecond)
	c.Lease = cmp.Or(c.Lease, 2*time.Second)
	c.ErrorRate = cmp.Or(c.ErrorRate, 0.05)
	c.DropRate = cmp.Or(c.DropRate, 0.05)
	c.LatencyMS = cmp.Or(c.LatencyMS, 5)
	c.RejectRate = cmp.Or(c.RejectRate, 0.03)
	c.LookupErrorRate = cmp.Or(c.LookupErrorRate, 0.1)
	c.KeyTTL = cmp.Or(c.KeyTTL, 2*time.Second)
	c.OutageLength = cmp.Or(c.OutageLength, 2*c.KeyTTL)
	c.OutageGap = cmp.Or(c.OutageGap, 5*time.Second)
	c.RetryBase = cmp.Or(c.RetryBase, 100*time.Millisecond)
	c.RetryMax = cmp.Or(c.RetryMax, 2*time.Second)
	c.GiveUpAfter = cmp.Or(c.GiveUpAfter, 30*time.Second)
	c.CrashProbability = cmp.Or(c.CrashProbability, 0.02)
	c.MaxElapsed = cmp.Or(c.MaxElapsed, 2*time.Minute)
	c.ProgressEvery = cmp.Or(c.ProgressEvery, 5*time.Second)
	c.DBDown = cmp.Or(c.DBDown, 3*time.Second)
	c.RecoverWithin = cmp.Or(c.RecoverWithin, 20*time.Second)
	c.WebhookFaults.defaults()
	c.WebhookDrainWithin = cmp.Or(c.WebhookDrainWithin, 2*time.Minute)
}

// Summary is what a run did and found.
type Summary struct {
	Seed           uint64         `json:"seed"`
	Intents        int            `json:"intents"`
	Authorized     int            `json:"authorized"`
	Declined       int            `json:"declined"`
	Failed         int            `json:"failed"`
	NeedsAttention int            `json:"needs_attention"`
	Unfinished     int            `json:"unfinished"`
	Attempts       int64          `json:"client_attempts"`
	Kills          int            `json:"kills"`
	Pauses         int            `json:"pauses"`
	Restarts       int            `json:"restarts"`
	DBRestarts     int            `json:"db_restarts"`
	DBDown         string         `json:"db_down_total"`
	DBMaxRecovery  string         `json:"db_max_recovery"`
	UnplannedExits int            `json:"unplanned_exits"`
	FailedAttempts map[string]int `json:"client_failed_attempts"`
	CrashPoints    map[string]int `json:"crash_points"`
	Takeovers      int64          `json:"takeovers"`
	PSPErrors      int            `json:"psp_errors_injected"`
	PSPDrops       int            `json:"psp_drops_injected"`
	PSPRejects     int            `json:"psp_rejects_injected"`
	PSPLookupFails int            `json:"psp_lookup_errors_injected"`
	Outages        int            `json:"psp_outages"`
	OutageTotal    string         `json:"psp_outage_total"`
	Authorizations int            `json:"psp_authorizations"`
	// From the mock's request log: every request it received.
	PSPRequests   int      `json:"psp_requests"`
	Sends         int      `json:"psp_sends"`          // POST /v1/authorizations
	Resends       int      `json:"psp_resends"`        // sends of a key after its first
	Lookups       int      `json:"psp_lookups"`        // GET /v1/authorizations?reference=
	LookupsFailed int      `json:"psp_lookups_failed"` // answered other than 200
	AttemptsMax   int      `json:"psp_attempts_per_key_max"`
	AttemptsP99   int      `json:"psp_attempts_per_key_p99"`
	Replays       int      `json:"replays_checked"`
	Duration      string   `json:"duration"`
	Violations    []string `json:"violations"`

	// ReaperProbe is how long the reapers took to finish a request
	// abandoned after the last database restart (see probeReapers),
	// "FAILED", or empty when the run had no database restarts.
	ReaperProbe string `json:"reaper_probe,omitempty"`

	// Lives: the captures, voids and refunds of the authorized intents,
	// and the PSP's books (lives.go, books.go). Webhooks: what the
	// webhook sink received (webhooksink.go, webhookcheck.go).
	Lives    LifeStats    `json:"lives"`
	Webhooks WebhookStats `json:"webhooks"`
	// Routing: failovers, breakers and stretches with several PSPs
	// (routing.go); nil with one.
	Routing *RoutingStats `json:"routing,omitempty"`
	// Stripe is what a run in Stripe's dialect did at the stand-in
	// (stripe.go); nil with the mock.
	Stripe *StripeStats `json:"stripe,omitempty"`
	// Failover: the failures of a formation's primary (failover.go); nil
	// without a formation.
	Failover *FailoverSummary `json:"failover,omitempty"`

	// History is the independent checker's verdict on what the clients
	// saw, and the PSPs' books (history.go); MismatchProbes the requests
	// sent under a finished intent's key that must be refused 422.
	History        *history.Verdict `json:"history,omitempty"`
	MismatchProbes int              `json:"mismatch_probes"`

	// Timeline is the run's faults and, per second, what the requests did
	// (series.go), drawn by Report.
	Timeline *RunTimeline `json:"timeline,omitempty"`
}

// Table renders the summary as a table.
func (s *Summary) Table() string {
	var b bytes.Buffer
	row := func(k string, v any) { fmt.Fprintf(&b, "| %-32s | %12v |\n", k, v) }
	fmt.Fprintf(&b, "| %-32s | %12s |\n|%s|%s|\n", "chaos run", "value", strings.Repeat("-", 34), strings.Repeat("-", 14))
	row("seed", s.Seed)
	row("intents", s.Intents)
	row("  final: authorized", s.Authorized)
	row("  final: declined", s.Declined)
	row("  final: failed (PSP refused)", s.Failed)
	row("  needs_attention (with reason)", s.NeedsAttention)
	row("  without an end", s.Unfinished)
	row("client attempts", s.Attempts)
	for _, c := range slices.Sorted(maps.Keys(s.FailedAttempts)) {
		row("  "+c, s.FailedAttempts[c])
	}
	row("workers killed (SIGKILL)", s.Kills)
	row("workers paused (SIGSTOP)", s.Pauses)
	row("worker restarts", s.Restarts)
	row("database restarts (immediate)", s.DBRestarts)
	row("  database down in total", s.DBDown)
	row("  slowest recovery of all procs", s.DBMaxRecovery)
	row("unplanned exits (api, reaper)", s.UnplannedExits)
	row("reaper probe: key finished in", cmp.Or(s.ReaperProbe, "not run"))
	for _, p := range charges.CrashPoints() {
		row("crash point "+p.String(), s.CrashPoints[p.String()])
	}
	row("takeovers (lock_version bumps)", s.Takeovers)
	row("PSP outages (error_rate 1)", s.Outages)
	row("  PSP down in total", cmp.Or(s.OutageTotal, "0s"))
	row("PSP 503s injected", s.PSPErrors)
	row("PSP responses dropped", s.PSPDrops)
	row("PSP final failures (400)", s.PSPRejects)
	row("PSP lookups failed (injected)", s.PSPLookupFails)
	row("PSP requests received", s.PSPRequests)
	row("  authorization sends", s.Sends)
	row("  resends (same key again)", s.Resends)
	row("  lookups by reference", s.Lookups)
	row("  lookups answered non-200", s.LookupsFailed)
	row("  sends per PSP key: max", s.AttemptsMax)
	row("  sends per PSP key: p99", s.AttemptsP99)
	row("PSP authorizations", s.Authorizations)
	row("replays checked byte for byte", s.Replays)
	s.livesAndWebhooksRows(row)
	s.routingRows(row)
	s.failoverRows(row)
	s.historyRows(row)
	row("duration", s.Duration)
	row("violations", len(s.Violations))
	for _, v := range s.Violations {
		fmt.Fprintf(&b, "VIOLATION: %s\n", v)
	}
	return b.String()
}

// Line is the summary in one line: the verdict and the numbers that make it.
func (s *Summary) Line() string {
	verdict := "PASS"
	if len(s.Violations) > 0 {
		verdict = "FAIL"
	}
	return fmt.Sprintf("chaos %s: seed %d, %d/%d intents ended (%d authorized, %d declined, %d failed, %d needs_attention), "+
		"%d PSP authorizations, %d lookups, %d resends, sends per key max %d p99 %d, %d PSP outages, "+
		"%d kills, %d pauses, %d database restarts, %d unplanned exits, %d replays checked, "+
		"%d lives (%d captured, %d voided, %d refunds), %d webhook events (%d deliveries, latency p50 %s p99 %s, first attempt p99 %s beside a hanging tenant, max backlog %d), %d violations, %s",
		verdict, s.Seed, s.Authorized+s.Declined+s.Failed+s.NeedsAttention, s.Intents, s.Authorized, s.Declined, s.Failed, s.NeedsAttention,
		s.Authorizations, s.Lookups, s.Resends, s.AttemptsMax, s.AttemptsP99, s.Outages,
		s.Kills, s.Pauses, s.DBRestarts, s.UnplannedExits, s.Replays,
		s.Lives.Lives, s.Lives.Captures, s.Lives.Voids, s.Lives.Refunds, s.Webhooks.Events, s.Webhooks.Deliveries,
		s.Webhooks.LatencyP50, s.Webhooks.LatencyP99, s.Webhooks.FirstAttemptP99, s.Webhooks.MaxBacklog, len(s.Violations), s.Duration)
}
