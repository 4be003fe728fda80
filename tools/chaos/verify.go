package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/client"
)

// verify checks the run's invariants from the database, the PSP's ledger
// and request log, the operator's list of requests that need attention, and
// fresh replays, and fills the summary's counts and violations.
// listNeedsAttention runs `bin/api requests list --state needs_attention
// --json`.
func verify(ctx context.Context, pool *pgxpool.Pool, pspURL string, transport http.RoundTripper,
	apiKey string, intents []*intent, sum *Summary, listNeedsAttention func() (string, error)) error {
	violate := func(format string, args ...any) {
		sum.Violations = append(sum.Violations, fmt.Sprintf(format, args...))
	}

	// Every intent ended: authorized, declined, failed, or given up to an
	// operator (needs_attention, checked below to carry a reason).
	wantCharge := map[string]string{} // key -> the charge status its answer implies
	for _, it := range intents {
		switch {
		case it.status == http.StatusCreated:
			sum.Authorized++
			wantCharge[it.in.Key] = "authorized"
		case it.status == http.StatusPaymentRequired && it.code == client.CodeCardDeclined:
			sum.Declined++
			wantCharge[it.in.Key] = "declined"
		case it.status == http.StatusPaymentRequired && it.code == client.CodePaymentFailed:
			sum.Failed++
			wantCharge[it.in.Key] = "failed"
		case it.status == http.StatusServiceUnavailable && it.code == client.CodePaymentUnresolved:
			sum.NeedsAttention++
			wantCharge[it.in.Key] = "pending"
		default:
			sum.Unfinished++
			violate("intent %s: no end: %d %s %v", it.in.Key, it.status, it.code, it.err)
		}
	}

	// Each given-up intent is needs_attention with its reason, as the
	// operator sees it; and no other key is.
	out, err := listNeedsAttention()
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	reasons := map[string]string{}
	for line := range strings.SplitSeq(out, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r struct {
			Key       string `json:"key"`
			State     string `json:"state"`
			LastError string `json:"last_error"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return fmt.Errorf("verify: requests list --json: %q: %w", line, err)
		}
		if r.State != "needs_attention" {
			violate("requests list --state needs_attention listed %s as %s", r.Key, r.State)
		}
		reasons[r.Key] = r.LastError
	}
	for _, it := range intents {
		reason, listed := reasons[it.in.Key]
		unresolved := it.code == client.CodePaymentUnresolved
		switch {
		case unresolved && !listed:
			violate("intent %s: answered payment_unresolved but not listed as needs_attention", it.in.Key)
		case unresolved && strings.TrimSpace(reason) == "":
			violate("intent %s: needs_attention without a reason (last_error empty)", it.in.Key)
		case !unresolved && listed && it.status != 0:
			violate("intent %s: ended %d %s but its key needs attention", it.in.Key, it.status, it.code)
		}
	}

	// One charge per (tenant, key).
	chargesByKey := map[string][]string{}
	chargeStatus := map[string]string{}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, id, status FROM charges`)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for rows.Next() {
		var key, id, status string
		if err := rows.Scan(&key, &id, &status); err != nil {
			rows.Close()
			return fmt.Errorf("verify: %w", err)
		}
		chargesByKey[key] = append(chargesByKey[key], id)
		chargeStatus[id] = status
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	for _, it := range intents {
		ids := chargesByKey[it.in.Key]
		switch want := wantCharge[it.in.Key]; {
		case len(ids) > 1:
		case want == "pending" && len(ids) == 0:
			// Given up before its charge was created: nothing to check.
		case want != "" && len(ids) != 1:
			violate("intent %s: %d charges, want 1", it.in.Key, len(ids))
		case want == "authorized" && lived(chargeStatus[ids[0]]):
			// Captured or voided since, by its life.
		case want != "" && chargeStatus[ids[0]] != want:
			violate("intent %s: answered as %s but its charge %s is %s", it.in.Key, want, ids[0], chargeStatus[ids[0]])
		}
	}
	for key, ids := range chargesByKey {
		if len(ids) > 1 {
			violate("key %s: %d charges %v", key, len(ids), ids)
		}
	}

	// At most one PSP authorization per charge, and none for anything
	// else: an authorized charge has exactly one, with status authorized;
	// a declined one only declines; a failed one nothing authorized at
	// all; a pending (needs_attention) one at most one, for the operator
	// to find.
	// The mock's request log, before the replays: every request the PSP
	// received, for the counts, and to prove that replays call nothing.
	var log struct{ Data []pspRequest }
	if err := getJSON(ctx, pspURL+"/_admin/requests", &log); err != nil {
		return fmt.Errorf("verify: request log: %w", err)
	}
	countRequests(sum, log.Data)
	// history says what the PSP received for a charge, for a violation
	// about it to show.
	history := func(id string) string {
		var b strings.Builder
		for _, r := range log.Data {
			if r.Reference == id {
				fmt.Fprintf(&b, "\n\t\t%s %s %s key=%s → %d", r.At, r.Method, r.Path, r.IdempotencyKey, r.Status)
			}
		}
		return b.String()
	}
	var ledger struct {
		Data []struct {
			ID, IdempotencyKey, Reference, Status string
		}
	}
	if err := getJSON(ctx, pspURL+"/_admin/authorizations", &ledger); err != nil {
		return fmt.Errorf("verify: ledger: %w", err)
	}
	sum.Authorizations = len(ledger.Data)
	authsByCharge := map[string]int{}
	authorizedByCharge := map[string]int{}
	for _, a := range ledger.Data {
		authsByCharge[a.Reference]++
		if a.Status == "authorized" {
			authorizedByCharge[a.Reference]++
		}
		if _, ok := chargeStatus[a.Reference]; !ok {
			violate("PSP authorization %s for unknown charge %s", a.ID, a.Reference)
		}
	}
	for id, status := range chargeStatus {
		n, authorized := authsByCharge[id], authorizedByCharge[id]
		switch {
		case n > 1:
			violate("charge %s: authorized %d times by the PSP%s", id, n, history(id))
		case authorized > 0 && (status == "failed" || status == "declined"):
			violate("charge %s: %s, but authorized at the PSP%s", id, status, history(id))
		case lived(status) && authorized != 1:
			violate("charge %s: authorized without a PSP authorization", id)
		case status == "declined" && n == 0:
			violate("charge %s: declined without a PSP decline", id)
		}
	}

	// No key left started.
	var started int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE state = 'started'`).Scan(&started); err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if started > 0 {
		violate("%d keys left started", started)
	}
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(lock_version - 1), 0) FROM idempotency_keys`).Scan(&sum.Takeovers); err != nil {
		return fmt.Errorf("verify: %w", err)
	}

	// Every replay is byte-identical to the first final answer; a
	// needs_attention key answers 503 payment_unresolved again. Neither
	// calls the PSP.
	hc := &http.Client{Transport: transport}
	for _, it := range intents {
		if it.status == 0 {
			continue
		}
		body, err := json.Marshal(it.in.Params)
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://replay/v1/charges", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("Idempotency-Key", it.in.Key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			violate("replay %s: %v", it.in.Key, err)
			continue
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			violate("replay %s: %v", it.in.Key, err)
			continue
		}
		sum.Replays++
		if it.code == client.CodePaymentUnresolved {
			var p struct{ Code string }
			_ = json.Unmarshal(got, &p)
			if resp.StatusCode != http.StatusServiceUnavailable || p.Code != client.CodePaymentUnresolved {
				violate("replay %s (needs_attention): got %d %q, want 503 payment_unresolved", it.in.Key, resp.StatusCode, got)
			}
			continue
		}
		if resp.StatusCode != it.status || !bytes.Equal(got, it.body) || resp.Header.Get("Idempotent-Replayed") != "true" {
			violate("replay %s: got %d %q (replayed=%q), first answer was %d %q",
				it.in.Key, resp.StatusCode, got, resp.Header.Get("Idempotent-Replayed"), it.status, it.body)
		}
	}
	var after struct{ Data []json.RawMessage }
	if err := getJSON(ctx, pspURL+"/_admin/requests", &after); err != nil {
		return fmt.Errorf("verify: request log: %w", err)
	}
	if n := len(after.Data) - len(log.Data); n != 0 {
		violate("the replays sent %d requests to the PSP", n)
	}

	var faults struct {
		Injected struct {
			Errors, Drops, Rejects int
			LookupErrors           int `json:"lookup_errors"`
		}
	}
	if err := getJSON(ctx, pspURL+"/_admin/faults", &faults); err != nil {
		return fmt.Errorf("verify: faults: %w", err)
	}
	sum.PSPErrors, sum.PSPDrops = faults.Injected.Errors, faults.Injected.Drops
	sum.PSPRejects, sum.PSPLookupFails = faults.Injected.Rejects, faults.Injected.LookupErrors
	return nil
}

// lived says a charge status is authorized, or one an authorization
// leads to (captured, voided).
func lived(status string) bool {
	return status == "authorized" || status == "captured" || status == "voided"
}

// pspRequest is one entry of the mock's request log (GET /_admin/requests).
type pspRequest struct {
	Method         string `json:"method"`
	Path           string `json:"path"`
	IdempotencyKey string `json:"idempotency_key"`
	Reference      string `json:"reference"`
	Status         int    `json:"status"`
	At             string `json:"at"`
}

// countRequests fills the summary's counts from the mock's request log:
// sends and resends of authorizations, lookups, and the attempts (sends)
// per PSP idempotency key, their maximum and 99th percentile.
func countRequests(sum *Summary, log []pspRequest) {
	sum.PSPRequests = len(log)
	perKey := map[string]int{}
	for _, r := range log {
		// The mock's authorizations, or Stripe's PaymentIntents and
		// their search (stripe.go).
		if r.Path != "/v1/authorizations" && r.Path != "/v1/payment_intents" && r.Path != "/v1/payment_intents/search" {
			continue
		}
		switch r.Method {
		case http.MethodPost:
			sum.Sends++
			perKey[r.IdempotencyKey]++
		case http.MethodGet:
			sum.Lookups++
			if r.Status != http.StatusOK {
				sum.LookupsFailed++
			}
		}
	}
	counts := make([]int, 0, len(perKey))
	for _, n := range perKey {
		counts = append(counts, n)
		sum.Resends += n - 1
	}
	sum.AttemptsMax, sum.AttemptsP99 = maxAndP99(counts)
}

// maxAndP99 returns the largest count and the 99th percentile (nearest
// rank) of counts; zeros for none.
func maxAndP99(counts []int) (int, int) {
	if len(counts) == 0 {
		return 0, 0
	}
	slices.Sort(counts)
	rank := (99*len(counts) + 99) / 100 // ceil(0.99·n), 1-based
	return counts[len(counts)-1], counts[rank-1]
}

func getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
