package chaos

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Losses is what a run on a formation lost with its promotions, sorted by
// kind (failover.go): with synchronous replication every count is 0; with
// asynchronous replication, what the violations of each kind mean.
type Losses struct {
	// Violations counts the run's violations by kind (violationKind).
	Violations map[string]int `json:"violations_by_kind"`
	// UnknownAuthorizations are PSP authorizations whose charge phasepay
	// does not have, counted after verify, whose replays retry every
	// intent as a client would: a charge lost with the old primary was
	// made again by the replay. DoubleCharges are those whose intent also
	// holds an authorization of a charge phasepay has (linked by amount,
	// which the intents draw at random from 100,000 values): the retry made
	// a second charge under a new PSP key. With derived ids the retry makes
	// the same charge, and the PSP answers it with the first authorization:
	// none is unknown. Orphans are the rest: a charge lost and never made
	// again (a replay the PSP answered under a key it had forgotten).
	UnknownAuthorizations int `json:"psp_authorizations_of_unknown_charges"`
	DoubleCharges         int `json:"double_charges"`
	Orphans               int `json:"orphan_authorizations"`
}

// violationKind names the kind of a violation by what it starts with.
func violationKind(v string) string {
	for _, k := range []struct{ prefix, kind string }{
		{"PSP authorization ", "PSP authorization of a charge phasepay does not have"},
		{"books: PSP refund ", "PSP refund phasepay does not have"},
		{"books: charge ", "PSP books differ from the charge's amounts"},
		{"replay of ", "a life's replay differs from its first answer"},
		{"replay ", "an intent's replay differs from its first answer"},
		{"intent ", "an intent's charge differs from its answer"},
		{"life of ", "a life's answer differs from the database"},
		{"webhooks: ", "webhooks"},
		{"key ", "lock_version went down"},
		{"the replays", "replays called the PSP"},
		{"failover ", "failover"},
		{"history: Porcupine", "the client history is not linearizable (Porcupine)"},
		{"history: PSP books", "a charge authorized at more than one PSP"},
	} {
		if strings.HasPrefix(v, k.prefix) {
			return k.kind
		}
	}
	return "other"
}

// losses sorts the run's violations and links the PSP's authorizations of
// charges phasepay does not have to their intents.
func (h *harness) losses(ctx context.Context, pool *pgxpool.Pool, pspURL string) (*Losses, error) {
	l := &Losses{Violations: map[string]int{}}
	for _, v := range h.sum.Violations {
		l.Violations[violationKind(v)]++
	}
	known := map[string]bool{}
	rows, err := pool.Query(ctx, `SELECT id FROM charges`)
	if err != nil {
		return nil, fmt.Errorf("losses: %w", err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("losses: %w", err)
		}
		known[id] = true
	}
	rows.Close()
	var ledger struct {
		Data []struct {
			Reference, Status, Currency string
			Amount                      int64
		}
	}
	if err := getJSON(ctx, pspURL+"/_admin/authorizations", &ledger); err != nil {
		return nil, fmt.Errorf("losses: %w", err)
	}
	authorizedKnown := map[int64]bool{} // amounts with an authorization of a known charge
	for _, a := range ledger.Data {
		if a.Status == "authorized" && known[a.Reference] {
			authorizedKnown[a.Amount] = true
		}
	}
	for _, a := range ledger.Data {
		if known[a.Reference] || a.Status != "authorized" {
			continue
		}
		l.UnknownAuthorizations++
		if authorizedKnown[a.Amount] && h.intentAmount(a.Amount) {
			l.DoubleCharges++
		} else {
			l.Orphans++
		}
	}
	return l, nil
}

// intentAmount reports whether an intent asked for amount.
func (h *harness) intentAmount(amount int64) bool {
	for _, it := range h.intents {
		if it.in.Params.Amount == amount {
			return true
		}
	}
	return false
}
