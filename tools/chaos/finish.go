package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/phasepay/phasepay/tools/procs"
)

// settle lets the reapers finish what the last kills abandoned, stops the
// sampling, and (after database restarts) probes the reapers; then every
// event must reach the sink, the probe's too.
func (h *harness) settle(ctx context.Context) error {
	cfg, sum, pool := h.cfg, h.sum, h.st.pool
	// Connections idle in the pool died with each restart.
	pool.Reset()
	// Let the reapers finish what the last kills abandoned.
	settle := time.Now().Add(3*cfg.Lease + 10*time.Second)
	for time.Now().Before(settle) {
		var started int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state = 'started'`).Scan(&started); err == nil && started == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.stopSampling()
	<-h.sampled
	if h.st.cluster != nil || cfg.Formation != nil {
		took, v, err := probeReapers(ctx, cfg, h.st.bin("api"), h.st.common, h.st.dbURL, h.st.apiKey, pool, h.rt, h.history)
		if err != nil {
			return err
		}
		sum.ReaperProbe = took.Truncate(time.Millisecond).String()
		if len(v) > 0 {
			sum.ReaperProbe = "FAILED"
		}
		sum.Violations = append(sum.Violations, v...)
	}

	// Every event delivered to the sink, after the probe's too.
	drained, v := drainWebhooks(ctx, pool, h.backlog, cfg.WebhookDrainWithin)
	sum.Webhooks.Drained = drained.Truncate(time.Millisecond).String()
	if v != "" {
		sum.Violations = append(sum.Violations, v)
	}
	h.backlog.mu.Lock()
	sum.Webhooks.MaxBacklog = h.backlog.max
	sum.Webhooks.MaxDueDelay = time.Duration(h.backlog.maxDelay * float64(time.Second)).Truncate(time.Millisecond).String()
	h.backlog.mu.Unlock()
	return nil
}

// collect puts into the summary what the clients, the processes, the
// lock_version sampling and the database restarts saw.
func (h *harness) collect() {
	sum := h.sum
	sum.Attempts = h.attempts.Load()
	h.answersMu.Lock()
	sum.FailedAttempts = h.answers
	h.answersMu.Unlock()
	for _, w := range h.st.workers {
		sum.Restarts += w.Restarts()
		countCrashPoints(w.LogText(), sum.CrashPoints, func(at time.Time, point string) {
			h.rec.MarkAt(at, "crash", w.Name(), "crashed itself at "+point)
		})
	}
	sum.Violations = append(sum.Violations, h.monoFaults...)
	sum.DBRestarts = int(h.db.restarts.Load())
	h.db.mu.Lock()
	sum.DBDown, sum.DBMaxRecovery = h.db.down.Truncate(time.Millisecond).String(), h.db.maxRecovery.Truncate(time.Millisecond).String()
	sum.Violations = append(sum.Violations, h.db.violations...)
	h.db.mu.Unlock()
	sum.Failover = h.failoverSummary()
	// No request is ever answered 500, whatever the database does.
	for class, n := range h.answers {
		if strings.HasPrefix(class, "500") {
			sum.Violations = append(sum.Violations, fmt.Sprintf("%d attempts answered %s", n, class))
		}
	}
	if n := h.answers5xx.count(500, h.start, time.Now()); n > 0 {
		sum.Violations = append(sum.Violations, fmt.Sprintf("%d attempts (intents and lives) answered 500", n))
	}
}

// verify checks the intents, the webhooks, the lives and the routing
// against the database and the PSP's own ledger, and every process for
// having exited only when the harness made it.
func (h *harness) verify(ctx context.Context) error {
	st, sum := h.st, h.sum
	if err := verify(ctx, st.pool, st.pspURL, h.rt, st.apiKey, h.intents, sum, func() (string, error) {
		return procs.RunOnce(ctx, st.bin("api"), map[string]string{"DATABASE_URL": st.dbURL}, "requests", "list", "--state", "needs_attention", "--limit", "10000", "--json")
	}); err != nil {
		return err
	}
	violate := func(format string, args ...any) {
		sum.Violations = append(sum.Violations, fmt.Sprintf(format, args...))
	}
	h.stopFair()
	if err := verifyWebhooks(ctx, st.pool, h.sink, h.hanging, h.db.downWindows(), &sum.Webhooks, violate); err != nil {
		return err
	}
	sum.Lives.Attempts = h.ops.attempts.Load()
	if err := verifyLives(ctx, st.pool, st.pspURL, h.rt, st.apiKey, h.intents, &sum.Lives, violate); err != nil {
		return err
	}
	if err := st.psps.verify(ctx, st.pool, st.processes(), sum, violate); err != nil {
		return err
	}
	if err := st.stripeStats(ctx, sum); err != nil {
		return err
	}
	// After the replays, so a process that dies by itself at any point
	// before the harness stops it is counted; the stop itself is planned.
	for _, p := range st.processes() {
		for _, e := range p.UnplannedExits() {
			sum.UnplannedExits++
			sum.Violations = append(sum.Violations, "unplanned exit: "+e)
		}
		// A panic the api recovered answered its request 500: a bug, even
		// when the client's retry then succeeded.
		for _, e := range recoveredPanics(p.LogText()) {
			sum.Violations = append(sum.Violations, p.Name()+": recovered panic: "+e)
		}
		// A 500's cause, which the client never sees: the api's log line.
		for _, e := range internalErrors(p.LogText()) {
			sum.Violations = append(sum.Violations, p.Name()+": answered 500: "+e)
		}
	}
	return nil
}

// recoveredPanics returns each panic a process logged (the api's
// recoverPanics: "msg":"panic"), with the first phasepay frame of its
// stack.
func recoveredPanics(logs string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"msg":"panic"`) {
			continue
		}
		var rec struct{ Panic, Stack string }
		if json.Unmarshal([]byte(line), &rec) != nil {
			out = append(out, line)
			continue
		}
		at := ""
		for _, frame := range strings.Split(rec.Stack, "\n") {
			if strings.Contains(frame, "phasepay/internal/") && !strings.Contains(frame, "recoverPanics") {
				at = " at " + strings.TrimSpace(frame)
				break
			}
		}
		out = append(out, rec.Panic+at)
	}
	return out
}

// internalErrors returns the error of each request a process answered 500
// (the api's "request failed" at level ERROR).
func internalErrors(logs string) []string {
	var out []string
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"msg":"request failed"`) || !strings.Contains(line, `"level":"ERROR"`) {
			continue
		}
		var rec struct {
			Error     string `json:"error"`
			RequestID string `json:"request_id"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			out = append(out, line)
			continue
		}
		out = append(out, rec.Error+" (request "+rec.RequestID+")")
	}
	return out
}

func countCrashPoints(logs string, into map[string]int, at func(time.Time, string)) {
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, `"msg":"chaos crash"`) {
			continue
		}
		var rec struct {
			Time  time.Time
			Point string
		}
		if json.Unmarshal([]byte(line), &rec) == nil {
			into[rec.Point]++
			at(rec.Time, rec.Point)
		}
	}
}
