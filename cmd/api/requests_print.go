package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/phasepay/phasepay/internal/charges"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/tenants"
	"github.com/phasepay/phasepay/internal/timeline"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// What `api requests list` and `api requests show` print: for a person,
// aligned columns or lines; with --json, the same fields as JSON. The state
// is the tenant view's (idempotency.RequestState) in both.

// requestJSON is one line of `requests list --json`.
type requestJSON struct {
	Tenant        string `json:"tenant"`
	Key           string `json:"key"`
	Endpoint      string `json:"endpoint"`
	State         string `json:"state"`
	RecoveryPoint string `json:"recovery_point"`
	// FailedAttempts counts the attempts that ended without finishing
	// (released); Attempts is the same number under its older name.
	FailedAttempts int     `json:"failed_attempts"`
	Attempts       int     `json:"attempts"`
	NextAttemptAt  *string `json:"next_attempt_at"`
	LastError      *string `json:"last_error"`
	// LastErrorDetail is the raw cause last_error summarises for the
	// tenant: operators only (it may name internal addresses).
	LastErrorDetail *string `json:"last_error_detail"`
	CreatedAt       string  `json:"created_at"`
}

func newRequestJSON(v idempotency.View, tenant string) requestJSON {
	r := requestJSON{
		Tenant: tenant, Key: v.Key, Endpoint: v.Method + " " + v.Path, State: string(v.State),
		RecoveryPoint: string(v.Point), FailedAttempts: v.Attempts, Attempts: v.Attempts, CreatedAt: v.CreatedAt.UTC().Format(time.RFC3339),
	}
	if v.NextAttemptAt != nil {
		s := v.NextAttemptAt.UTC().Format(time.RFC3339)
		r.NextAttemptAt = &s
	}
	if v.LastError != "" {
		lastErr := string(webhooks.RedactSecrets([]byte(v.LastError)))
		r.LastError = &lastErr
	}
	if v.LastErrorDetail != "" {
		r.LastErrorDetail = &v.LastErrorDetail
	}
	return r
}

func printRequests(w io.Writer, views []idempotency.View, names map[int64]string, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, v := range views {
			if err := enc.Encode(newRequestJSON(v, names[v.TenantID])); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tKEY\tENDPOINT\tSTATE\tRECOVERY POINT\tFAILED ATTEMPTS\tNEXT ATTEMPT\tLAST ERROR")
	for _, v := range views {
		r := newRequestJSON(v, names[v.TenantID])
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.Tenant, r.Key, r.Endpoint, r.State, r.RecoveryPoint, r.FailedAttempts,
			orDash(r.NextAttemptAt), orDash(r.LastError))
	}
	return tw.Flush()
}

func orDash(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

func tenantNames(ctx context.Context, pool *pgxpool.Pool, views []idempotency.View) (map[int64]string, error) {
	ids := make([]int64, 0, len(views))
	for _, v := range views {
		ids = append(ids, v.TenantID)
	}
	return tenants.Names(ctx, pool, ids)
}

// shownRequest is `requests show`: the whole record.
type shownRequest struct {
	requestJSON
	ResponseStatus *int               `json:"response_status"`
	Response       json.RawMessage    `json:"response"`
	CompletedAt    *string            `json:"completed_at"`
	Charge         json.RawMessage    `json:"charge"`
	Resolutions    []charges.Resolved `json:"resolutions"`
	// ObjectID, Holder (who holds the key now, "" if nobody), the trace of
	// the claiming request, the key's hash as spans carry it, and the
	// timeline (internal/timeline; printed by printTimeline).
	ObjectID string `json:"object_id"`
	Holder   string `json:"holder"`
	// LockVersion is the key's fencing token now: every takeover, and
	// every resolution tried, raises it (the timeline says which).
	LockVersion int64            `json:"lock_version"`
	TraceID     string           `json:"trace_id"`
	KeyHash     string           `json:"key_hash"`
	Timeline    []timeline.Entry `json:"timeline"`
}

func showRequest(ctx context.Context, pool *pgxpool.Pool, t tenants.Tenant, key string) (*shownRequest, error) {
	v, err := idempotency.GetView(ctx, pool, t.ID, key)
	if err != nil {
		return nil, err
	}
	shown := &shownRequest{requestJSON: newRequestJSON(v, t.Name), ResponseStatus: v.ResponseStatus,
		Response: json.RawMessage("null"), Charge: json.RawMessage("null"), Resolutions: []charges.Resolved{}}
	if v.CompletedAt != nil {
		s := v.CompletedAt.UTC().Format(time.RFC3339)
		shown.CompletedAt = &s
	}
	store, err := idempotency.NewStore(idempotency.Config{})
	if err != nil {
		return nil, err
	}
	rec, err := store.Lookup(ctx, pool, t.ID, key)
	if err != nil {
		return nil, err
	}
	if rec.Response != nil {
		// A webhook endpoint's signing secret is never shown: stored
		// answers hold webhooks.RedactedSecret, and one stored before
		// they did is redacted here.
		body := webhooks.RedactSecrets(rec.Response.Body)
		if json.Valid(body) {
			shown.Response = body
		} else {
			raw, _ := json.Marshal(string(body))
			shown.Response = raw
		}
	}
	if v.ObjectID != "" {
		if c, err := charges.ByID(ctx, pool, t.ID, v.ObjectID); err == nil {
			if shown.Charge, err = c.MarshalJSON(); err != nil {
				return nil, err
			}
		}
	}
	if shown.Resolutions, err = charges.ResolutionsOf(ctx, pool, rec.ID()); err != nil {
		return nil, err
	}
	tl, err := timeline.Read(ctx, pool, t.ID, key)
	if err != nil {
		return nil, err
	}
	shown.ObjectID, shown.Holder, shown.TraceID, shown.Timeline = tl.ObjectID, tl.Holder, tl.TraceID(), tl.Entries
	shown.LockVersion = rec.LockVersion
	shown.KeyHash = idempotency.KeyHash(key)
	return shown, nil
}

// print writes the record for a person: one field per line, values in one
// column, the stored answer as indented JSON under its status, the charge
// as it is now on one line, then each resolution, the trace, and the
// timeline as a table (printTimeline).
func (s *shownRequest) print(w io.Writer) error {
	status := "-"
	if s.ResponseStatus != nil {
		status = strconv.Itoa(*s.ResponseStatus)
	}
	charge := "-"
	if !isNull(s.Charge) {
		var c struct {
			ID, Status, Currency, PSP string
			Amount                    int64
			AmountCaptured            int64   `json:"amount_captured"`
			AmountRefunded            int64   `json:"amount_refunded"`
			PSPReference              *string `json:"psp_reference"`
		}
		if err := json.Unmarshal(s.Charge, &c); err != nil {
			return fmt.Errorf("charge: %w", err)
		}
		charge = fmt.Sprintf("%s %s, %d %s, captured %d, refunded %d, at PSP %s as %s",
			c.ID, c.Status, c.Amount, c.Currency, c.AmountCaptured, c.AmountRefunded, c.PSP, orDash(c.PSPReference))
	}
	// One width for every label, the JSON blocks between them included
	// ("failed attempts", one longer than "recovery point", takes its
	// one space).
	width := len("recovery point") + 2
	line := func(label, value string) {
		fmt.Fprintf(w, "%-*s%s\n", width, label, value)
	}
	line("tenant", s.Tenant)
	line("key", s.Key)
	line("endpoint", s.Endpoint)
	line("state", s.State)
	line("recovery point", s.RecoveryPoint)
	line("failed attempts", strconv.Itoa(s.FailedAttempts))
	line("next attempt", orDash(s.NextAttemptAt))
	line("last error", orDash(s.LastError))
	line("error detail", orDash(s.LastErrorDetail))
	line("created", s.CreatedAt)
	line("completed", orDash(s.CompletedAt))
	line("stored answer", status)
	if err := writeIndentedJSON(w, s.Response); err != nil {
		return err
	}
	line("charge", charge)
	line("resolutions", strconv.Itoa(len(s.Resolutions)))
	for i, r := range s.Resolutions {
		said := "not looked up (--force)"
		if r.PSPSaid != nil {
			said = *r.PSPSaid
		}
		_, err := fmt.Fprintf(w, "  %d. %s as %s by %s: %s (PSP: %s)\n",
			i+1, r.ResolvedAt.UTC().Format(time.RFC3339), r.As, r.By, r.Reason, said)
		if err != nil {
			return err
		}
	}
	line("held by", orDash(&s.Holder))
	line("lock version", strconv.FormatInt(s.LockVersion, 10))
	line("trace", fmt.Sprintf("%s (its spans carry phasepay.key_hash=%s)", orDash(&s.TraceID), s.KeyHash))
	return printTimeline(w, s.Timeline)
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// writeIndentedJSON writes raw indented by two spaces under the line
// before it, or nothing for null.
func writeIndentedJSON(w io.Writer, raw json.RawMessage) error {
	if isNull(raw) {
		return nil
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "  ", "  "); err != nil {
		// Not JSON (a stored answer is a JSON string then): as it is.
		b.Reset()
		b.Write(raw)
	}
	_, err := fmt.Fprintf(w, "  %s\n", strings.TrimRight(b.String(), "\n"))
	return err
}
