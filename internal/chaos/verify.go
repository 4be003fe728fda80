package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
)

// verify checks the run's invariants from the database, the PSP's ledger
// and fresh replays, and fills the summary's counts and violations.
func verify(ctx context.Context, pool *pgxpool.Pool, pspURL string, transport http.RoundTripper,
	apiKey string, intents []*intent, sum *Summary) error {
	violate := func(format string, args ...any) {
		sum.Violations = append(sum.Violations, fmt.Sprintf(format, args...))
	}

	// Every intent reached a final answer.
	for _, it := range intents {
		switch it.status {
		case http.StatusCreated:
			sum.Authorized++
		case http.StatusPaymentRequired:
			sum.Declined++
		default:
			sum.Unfinished++
			violate("intent %s: no final answer: %v", it.in.Key, it.err)
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
		if n := len(chargesByKey[it.in.Key]); n != 1 && it.status != 0 {
			violate("intent %s: %d charges, want 1", it.in.Key, n)
		}
	}
	for key, ids := range chargesByKey {
		if len(ids) > 1 {
			violate("key %s: %d charges %v", key, len(ids), ids)
		}
	}

	// Exactly one PSP authorization per charge, and none for anything else.
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
	for _, a := range ledger.Data {
		authsByCharge[a.Reference]++
		if _, ok := chargeStatus[a.Reference]; !ok {
			violate("PSP authorization %s for unknown charge %s", a.ID, a.Reference)
		}
	}
	for id, status := range chargeStatus {
		switch n := authsByCharge[id]; {
		case n > 1:
			violate("charge %s: authorized %d times by the PSP", id, n)
		case n == 0 && status != "pending":
			violate("charge %s: %s without a PSP authorization", id, status)
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

	// Every replay is byte-identical to the first final answer.
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
		if resp.StatusCode != it.status || !bytes.Equal(got, it.body) || resp.Header.Get("Idempotent-Replayed") != "true" {
			violate("replay %s: got %d %q (replayed=%q), first answer was %d %q",
				it.in.Key, resp.StatusCode, got, resp.Header.Get("Idempotent-Replayed"), it.status, it.body)
		}
	}

	var faults struct {
		Injected struct{ Errors, Drops int }
	}
	if err := getJSON(ctx, pspURL+"/_admin/faults", &faults); err != nil {
		return fmt.Errorf("verify: faults: %w", err)
	}
	sum.PSPErrors, sum.PSPDrops = faults.Injected.Errors, faults.Injected.Drops
	return nil
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
