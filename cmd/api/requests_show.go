package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/timeline"
)

// `requests show` without --json ends with the request's timeline as a
// table of time, holder and what happened.

// showTime is how the timeline's times print: UTC, to the microsecond (the
// entries of one transaction share their time).
const showTime = "2006-01-02 15:04:05.000000"

// printTimeline writes a request's timeline as a table: time, holder,
// what happened.
func printTimeline(w io.Writer, entries []timeline.Entry) error {
	fmt.Fprintln(w)
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "no timeline (recorded from migration 00022 on, and not with TIMELINE=off)")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME (UTC)\tHOLDER\tWHAT")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", e.At.UTC().Format(showTime), orDash(&e.Holder), describe(e))
	}
	return tw.Flush()
}

// describe says what an entry records, in a line.
func describe(e timeline.Entry) string {
	switch e.Kind {
	case idempotency.KindClaimed:
		return fmt.Sprintf("claimed the key (lock_version %d)", e.LockVersion)
	case idempotency.KindReached:
		return "reached " + string(e.RecoveryPoint)
	case idempotency.KindTakenOver:
		return fmt.Sprintf("took the key over: %s (lock_version %d)", takenBy(e.By), e.LockVersion)
	case idempotency.KindPSPCall:
		return describePSPCall(e)
	case idempotency.KindReleased:
		next := "gave up: needs_attention"
		if e.NextAttemptAt != nil {
			next = "next attempt " + e.NextAttemptAt.UTC().Format(showTime)
		}
		return fmt.Sprintf("released: %s; %s (cause: %s)", e.Reason, next, e.Detail)
	case idempotency.KindFinished:
		return fmt.Sprintf("finished: answer %d stored", e.ResponseStatus)
	case idempotency.KindMoved:
		return "moved to " + orDash(&e.PSP)
	case idempotency.KindRetried:
		return fmt.Sprintf("retried by %s: next attempt due now", orDash(&e.Operator))
	case idempotency.KindResolved:
		return fmt.Sprintf("resolved as %s by %s (lock_version %d): %s", e.As, orDash(&e.Operator), e.LockVersion, e.Detail)
	case idempotency.KindResolutionRefused:
		return fmt.Sprintf("resolution as %s by %s refused, back to needs_attention (lock_version %d): %s",
			e.As, orDash(&e.Operator), e.LockVersion, e.Detail)
	case timeline.KindEvent:
		return fmt.Sprintf("event %s written: %s", e.EventType, e.EventID)
	case timeline.KindWebhookAttempt:
		answer := "no answer"
		if e.Status != nil {
			answer = fmt.Sprintf("answered %d", *e.Status)
		}
		if e.Error != "" {
			answer += ": " + e.Error
		}
		return fmt.Sprintf("webhook attempt %d of %s to %s: %s in %d ms", e.Attempt, e.EventID, e.EndpointID, answer, deref(e.DurationMS))
	case timeline.KindWebhookRedelivery:
		to := "every endpoint it was owed to"
		if e.EndpointID != "" {
			to = e.EndpointID
		}
		return fmt.Sprintf("webhook redelivery of %s to %s asked by %s (%s): %d made due", e.EventID, to, e.Operator, e.Via, e.Attempt)
	}
	return string(e.Kind)
}

func describePSPCall(e timeline.Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "PSP call: %s at %s", orDash(&e.Operation), orDash(&e.PSP))
	if e.PSPKey != "" {
		fmt.Fprintf(&b, ", key %s", e.PSPKey)
	}
	fmt.Fprintf(&b, ": %s", e.Outcome)
	if e.Status != nil {
		fmt.Fprintf(&b, ", status %d", *e.Status)
	} else {
		b.WriteString(", no answer")
	}
	fmt.Fprintf(&b, ", %d ms (sends %d, lookups %d)", deref(e.DurationMS), deref(e.Sends), deref(e.Lookups))
	return b.String()
}

func takenBy(role string) string {
	switch role {
	case idempotency.RoleReaper:
		return "by the reaper"
	case idempotency.RoleAPI:
		return "by a client's retry"
	}
	return "by " + role
}

func deref[T int | int64](p *T) T {
	if p == nil {
		return 0
	}
	return *p
}
