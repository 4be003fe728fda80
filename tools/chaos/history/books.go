package history

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// Books is what the PSPs' own books hold: at most one authorization per
// charge is the promise, over every PSP together.
//
// It is a check of the books' final state, not a second model: the
// authorizations are made by phasepay, not by the clients, so no client
// operation returns them; and a mock remembers every authorization for
// ever, so two ever held for one charge are both in its books at the end.
type Books struct {
	PSPs []string `json:"psps"`
	// Charges is how many charges hold an authorization at some PSP;
	// MaxPerCharge the most any one holds (1: the promise kept).
	Charges      int `json:"charges_authorized"`
	MaxPerCharge int `json:"max_authorizations_per_charge"`
	// Over names the charges holding more than one, each with its
	// authorizations ("ch_x: primary auth_1, secondary auth_2").
	Over []string `json:"charges_over_one,omitempty"`
}

// Kept says at most one PSP authorization is held per charge.
func (b *Books) Kept() bool { return b.MaxPerCharge <= 1 }

// Line says what the books hold in one line.
func (b *Books) Line() string {
	verdict := "at most one PSP holds an authorization per charge"
	if !b.Kept() {
		verdict = fmt.Sprintf("NOT at most one PSP authorization per charge: %d charges hold more (up to %d)", len(b.Over), b.MaxPerCharge)
	}
	return fmt.Sprintf("%s (%d charges authorized, at %d PSPs: %s)", verdict, b.Charges, len(b.PSPs), strings.Join(b.PSPs, ", "))
}

// ReadBooks reads every PSP's authorizations (GET /_admin/authorizations of
// the mock PSP, by name) and counts those with status authorized per
// charge (their reference).
func ReadBooks(ctx context.Context, psps map[string]string) (*Books, error) {
	b := &Books{PSPs: slices.Sorted(maps.Keys(psps))}
	held := map[string][]string{} // charge -> "psp auth_id"
	for _, name := range b.PSPs {
		var l struct {
			Data []struct{ ID, Reference, Status string }
		}
		if err := getJSON(ctx, psps[name]+"/_admin/authorizations", &l); err != nil {
			return nil, fmt.Errorf("books of %s: %w", name, err)
		}
		for _, a := range l.Data {
			if a.Status == "authorized" {
				held[a.Reference] = append(held[a.Reference], name+" "+a.ID)
			}
		}
	}
	b.Charges = len(held)
	for _, id := range slices.Sorted(maps.Keys(held)) {
		n := len(held[id])
		b.MaxPerCharge = max(b.MaxPerCharge, n)
		if n > 1 {
			b.Over = append(b.Over, id+": "+strings.Join(held[id], ", "))
		}
	}
	return b, nil
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
