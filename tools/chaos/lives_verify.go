package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/client"
)

// lifeChargesSQL, lifeRefundsSQL and lifeKeysSQL read what the lives'
// answers are held against: every charge's status and amount captured,
// every refund, and which keys an operator must resolve.
const (
	lifeChargesSQL = `SELECT id, status, amount, amount_captured FROM charges`
	lifeRefundsSQL = `SELECT id, status, amount FROM refunds`
	lifeKeysSQL    = `SELECT key FROM idempotency_keys WHERE state = 'needs_attention'`
)

// verifyLives holds every operation's first final answer against the
// database (a 200 capture is a captured charge with that amount, a 201
// refund a succeeded refund of its amount, a 400 only where the plan made
// one possible: a race lost, a refund of what was no longer left), checks
// that each given-up operation needs attention, replays every answer byte
// for byte without calling the PSP, and then checks the books (checkBooks).
func verifyLives(ctx context.Context, pool *pgxpool.Pool, pspURL string, rt http.RoundTripper, apiKey string,
	intents []*intent, st *LifeStats, violate func(string, ...any)) error {
	type charge struct {
		status           string
		amount, captured int64
	}
	charges := map[string]charge{}
	refunds := map[string]charge{}
	needsAttention := map[string]bool{}
	for _, q := range []string{lifeChargesSQL, lifeRefundsSQL, lifeKeysSQL} {
		rows, err := pool.Query(ctx, q)
		if err != nil {
			return fmt.Errorf("verify lives: %w", err)
		}
		for rows.Next() {
			var (
				id string
				c  charge
			)
			switch q {
			case lifeChargesSQL:
				err = rows.Scan(&id, &c.status, &c.amount, &c.captured)
				charges[id] = c
			case lifeRefundsSQL:
				err = rows.Scan(&id, &c.status, &c.amount)
				refunds[id] = c
			default:
				err = rows.Scan(&id)
				needsAttention[id] = true
			}
			if err != nil {
				rows.Close()
				return fmt.Errorf("verify lives: %w", err)
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("verify lives: %w", err)
		}
	}

	for _, it := range intents {
		lf := it.life
		if lf == nil || lf.charge == "" {
			continue
		}
		st.Lives++
		if lf.plan.race {
			st.Races++
		}
		c := charges[lf.charge]
		for _, op := range lf.ops {
			what := fmt.Sprintf("life of %s: %s %s (key %s)", it.in.Key, op.kind, op.body, op.key)
			if op.status == 0 {
				violate("%s: no end: %v", what, op.err)
				continue
			}
			if op.code == client.CodePaymentUnresolved {
				st.NeedsAttention++
				if !needsAttention[op.key] {
					violate("%s: answered payment_unresolved, but its key does not need attention", what)
				}
				continue
			}
			if needsAttention[op.key] {
				violate("%s: ended %d %s, but its key needs attention", what, op.status, op.code)
			}
			refusedOK := false
			switch op.kind + " " + fmt.Sprint(op.status) {
			case "capture 200":
				st.Captures++
				want := c.amount
				if lf.plan.capture != nil {
					st.Partial++
					want = *lf.plan.capture
				}
				var got struct {
					Status         string `json:"status"`
					AmountCaptured int64  `json:"amount_captured"`
				}
				_ = json.Unmarshal(op.resp, &got)
				if got.Status != "captured" || got.AmountCaptured != want || c.status != "captured" || c.captured != want {
					violate("%s: answered %s with %d captured, asked %d; the charge is %s with %d captured", what, got.Status, got.AmountCaptured, want, c.status, c.captured)
				}
			case "void 200":
				st.Voids++
				if c.status != "voided" {
					violate("%s: answered 200, but the charge is %s", what, c.status)
				}
			case "capture 402", "void 402":
				st.SettleFailed++
				if op.kind == "capture" && c.status == "captured" || op.kind == "void" && c.status == "voided" {
					violate("%s: refused (402), but the charge is %s", what, c.status)
				}
			case "refund 201":
				st.Refunds++
				var got struct {
					ID     string `json:"id"`
					Status string `json:"status"`
					Amount int64  `json:"amount"`
				}
				_ = json.Unmarshal(op.resp, &got)
				if r := refunds[got.ID]; got.Status != "succeeded" || r.status != "succeeded" || r.amount != got.Amount {
					violate("%s: answered %s %s for %d; in the database %s for %d", what, got.ID, got.Status, got.Amount, r.status, r.amount)
				}
			case "refund 402":
				st.RefundsFailed++
			case "capture 400", "void 400":
				st.Refused++
				refusedOK = lf.plan.race
			case "refund 400":
				st.Refused++
				// Only a refund of all that is left can find nothing
				// left, or race another; fixed amounts never sum past
				// the capture.
				rest := !bytes.Contains(op.body, []byte(`"amount"`))
				refusedOK = rest || lf.plan.parallel && lf.plan.rest
			default:
				violate("%s: unexpected answer %d %s", what, op.status, op.resp)
				continue
			}
			if op.status == http.StatusBadRequest && !refusedOK {
				violate("%s: refused %s (%s), which its plan cannot cause", what, op.code, op.resp)
			}
		}
	}

	// Every final answer replays byte for byte, and a given-up one stays
	// given up; the replays call the PSP for nothing.
	var before struct{ Data []json.RawMessage }
	if err := getJSON(ctx, pspURL+"/_admin/requests", &before); err != nil {
		return fmt.Errorf("verify lives: %w", err)
	}
	d := &opDriver{hc: &http.Client{Transport: rt}, apiKey: apiKey}
	for _, it := range intents {
		if it.life == nil {
			continue
		}
		for _, op := range it.life.ops {
			if op.status == 0 {
				continue
			}
			status, code, body, _, err := d.send(ctx, &lifeOp{key: op.key, path: op.path, body: op.body})
			st.Replays++
			switch {
			case err != nil:
				violate("replay of %s: %v", op.key, err)
			case op.code == client.CodePaymentUnresolved:
				if status != http.StatusServiceUnavailable || code != op.code {
					violate("replay of %s (needs_attention): got %d %s, want 503 payment_unresolved", op.key, status, body)
				}
			case status != op.status || !bytes.Equal(body, op.resp):
				violate("replay of %s: got %d %q, first answer %d %q", op.key, status, body, op.status, op.resp)
			}
		}
	}
	var after struct{ Data []json.RawMessage }
	if err := getJSON(ctx, pspURL+"/_admin/requests", &after); err != nil {
		return fmt.Errorf("verify lives: %w", err)
	}
	if n := len(after.Data) - len(before.Data); n != 0 {
		violate("the replays of the lives sent %d requests to the PSP", n)
	}
	return checkBooks(ctx, pool, pspURL, st, violate)
}

// livesAndWebhooksRows renders the lives' and the webhooks' rows of the
// summary table.
func (s *Summary) livesAndWebhooksRows(row func(string, any)) {
	l := s.Lives
	row("payment lives (authorized)", l.Lives)
	row("  captured (partially)", fmt.Sprintf("%d (%d)", l.Captures, l.Partial))
	row("  voided", l.Voids)
	row("  capture/void races", l.Races)
	row("  refunds succeeded", l.Refunds)
	row("  refused by the PSP (402)", l.SettleFailed+l.RefundsFailed)
	row("  refused by phasepay (400)", l.Refused)
	row("  needs_attention", l.NeedsAttention)
	row("  attempts", l.Attempts)
	row("  replays checked", l.Replays)
	row("PSP captures / voids / refunds", fmt.Sprintf("%d/%d/%d", l.PSPCaptures, l.PSPVoids, l.PSPRefunds))
	w := s.Webhooks
	row("webhook events written", w.Events)
	row("  deliveries received by sink", w.Deliveries)
	row("  accepted (2xx in time)", w.Accepted)
	row("  duplicates received", w.Duplicates)
	row("  duplicates accepted", w.DuplicatesAccepted)
	faults := make([]string, 0, len(w.Faults))
	for _, k := range []string{sinkError, sinkDrop, sinkHang, sinkTimeout} {
		faults = append(faults, fmt.Sprint(w.Faults[k]))
	}
	row("  sink faults 5xx/drop/slow/late", strings.Join(faults, "/"))
	row("  failed attempts (phasepay)", w.FailedAttempts)
	row("  deliveries given up", w.GivenUp)
	row("  latency p50", w.LatencyP50)
	row("  latency p99", w.LatencyP99)
	row("  latency max", w.LatencyMax)
	row("  first attempt p50 (from commit)", w.FirstAttemptP50)
	row("  first attempt p99 (bound "+w.FirstAttemptBound+")", w.FirstAttemptP99)
	row("  first attempt max", w.FirstAttemptMax)
	row("  left out (database restarts)", w.FirstAttemptExcluded)
	row("hanging tenant's endpoints", fmt.Sprintf("%d (17th: %s)", w.Hanging.Endpoints, w.Hanging.Refused))
	row("  its events / deliveries hung", fmt.Sprintf("%d/%d", w.Hanging.Events, w.Hanging.Deliveries))
	row("  largest backlog", w.MaxBacklog)
	row("  longest due delay", w.MaxDueDelay)
	row("  backlog drained in", w.Drained)
}
