package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/phasepay/phasepay/client"
)

// ProgressEveryDefault is how often resume reports progress: often enough
// that a long run visibly moves, rarely enough not to drown its output.
const ProgressEveryDefault = 5 * time.Second

// resume drives every journaled intent and prints one line per intent as
// it ends; any intent without a charge fails the run (exit 1), after a
// summary line on stderr.
func (m *Main) resume(ctx context.Context, c *client.Client, prog *progress) error {
	stop := m.reportProgress(prog)
	defer stop()
	counts := map[string]int{}
	var order []string
	total, notOK := 0, 0
	var werr error
	err := c.ResumeEach(ctx, func(i, n int, r client.Result) {
		prog.done(i, n)
		outcome, line := resumeLine(r)
		if counts[outcome] == 0 {
			order = append(order, outcome)
		}
		counts[outcome]++
		total = n
		if r.Err != nil {
			notOK++
		}
		if werr == nil {
			if _, err := fmt.Fprintln(m.Stdout, line); err != nil {
				werr = fmt.Errorf("write output: %w", err)
			}
		}
	})
	stop()
	if werr != nil {
		return werr
	}
	if total > 0 {
		parts := make([]string, 0, len(order))
		for _, o := range order {
			parts = append(parts, fmt.Sprintf("%d %s", counts[o], o))
		}
		fmt.Fprintf(m.Stderr, "chargectl: resumed %d intents: %s\n", total, strings.Join(parts, ", "))
	}
	if err != nil {
		return err
	}
	if notOK > 0 {
		return fmt.Errorf("%d of %d pending intents did not succeed", notOK, total)
	}
	return nil
}

// resumeLine renders one intent's end as a tab-separated line: key,
// outcome, the id of the object (the charge; the refund once a refund
// succeeded; "-" when none is known) and, for anything but success, the
// server's code and detail, after the op for intents other than charges
// ("capture: 400 charge_not_capturable: ..."). It returns the outcome too.
//
// The outcomes: the charge's status (authorized, captured, voided, ...) or
// refunded; declined and failed (402: final, the charge exists); refused
// (400 for the charge's state, such as charge_not_capturable: final);
// unresolved (503 payment_unresolved: an operator must act; the intent is
// kept); unknown (gave up or interrupted: the intent is kept for the next
// resume); error (any other final answer, such as a 422: the intent is
// dropped, nothing was done under it).
func resumeLine(r client.Result) (outcome, line string) {
	key := r.Intent.Key
	op := cmp.Or(r.Intent.Op, client.OpCharge)
	switch {
	case r.Err == nil && r.Refund != nil:
		outcome = "refunded"
		if r.Refund.Status != client.RefundSucceeded {
			outcome = cmp.Or(string(r.Refund.Status), "ok")
		}
		return outcome, strings.Join([]string{key, outcome, cmp.Or(r.Refund.ID, "-")}, "\t")
	case r.Err == nil:
		status := cmp.Or(string(r.Charge.Status), "ok")
		return status, strings.Join([]string{key, status, cmp.Or(r.Charge.ID, "-")}, "\t")
	}
	var apiErr *client.Error
	charge, why := cmp.Or(r.Intent.ChargeID, r.Intent.Refund.Charge, "-"), oneLine(r.Err.Error())
	if errors.As(r.Err, &apiErr) {
		charge = cmp.Or(apiErr.Problem.Charge, charge)
		why = answer(apiErr)
	}
	switch {
	case errors.Is(r.Err, client.ErrDeclined):
		outcome = "declined"
	case errors.Is(r.Err, client.ErrPaymentFailed):
		outcome = "failed"
	case errors.Is(r.Err, client.ErrNotAllowed):
		outcome = "refused"
	case errors.Is(r.Err, client.ErrUnresolved):
		outcome, why = "unresolved", why+" (kept: resume again once an operator resolved it)"
	case errors.Is(r.Err, client.ErrGaveUp), errors.Is(r.Err, context.Canceled), errors.Is(r.Err, context.DeadlineExceeded):
		last := "no answer"
		if apiErr != nil {
			last = "last answer " + why
		}
		outcome, why = "unknown", "gave up retrying, "+last+" (kept for the next resume)"
	default:
		outcome = "error"
	}
	if op != client.OpCharge {
		why = string(op) + ": " + why
	}
	return outcome, strings.Join([]string{key, outcome, charge, why}, "\t")
}

// progress is what resume has done so far, updated by the client's
// attempt hook and by each intent's end, read by the progress reporter.
type progress struct {
	mu          sync.Mutex
	ended, n    int
	current     string
	attempts    int
	lastAttempt string
}

func (p *progress) attempt(in client.Intent, n, status int, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current, p.attempts = in.Key, n
	switch {
	case err == nil:
		p.lastAttempt = fmt.Sprintf("%d", status)
	case status != 0:
		var apiErr *client.Error
		if errors.As(err, &apiErr) {
			p.lastAttempt = fmt.Sprintf("%d %s", status, apiErr.Problem.Code)
		} else {
			p.lastAttempt = fmt.Sprintf("%d", status)
		}
	default:
		p.lastAttempt = "no answer"
	}
}

func (p *progress) done(i, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended, p.n, p.current, p.attempts = i, n, "", 0
}

func (p *progress) line() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("chargectl: resume: %d of %d intents done", p.ended, p.n)
	if p.n == 0 {
		s = fmt.Sprintf("chargectl: resume: %d intents done", p.ended)
	}
	if p.current != "" {
		s += fmt.Sprintf("; intent %s: attempt %d, last %s", p.current, p.attempts, p.lastAttempt)
	}
	return s
}

// reportProgress prints a progress line to stderr every m.ProgressEvery
// until the returned stop is called (safe to call twice).
func (m *Main) reportProgress(p *progress) (stop func()) {
	if m.ProgressEvery <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(m.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintln(m.Stderr, p.line())
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
