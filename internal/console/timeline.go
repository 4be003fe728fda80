package console

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/phasepay/phasepay/internal/console/plot"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/webhooks"
)

// A request's timeline, drawn: one lane per worker that held the key (its
// holder: api or reaper, host, pid, run), with the spans it held the lease,
// the recovery points it reached, its PSP calls as bars, its release or
// the takeover that ended its hold; and a lane for the events the request
// wrote and their webhook deliveries.

// entry is one entry of the timeline the request recorded
// (idempotency_keys.timeline, migrations/00022): when, what, by whom,
// under which fencing token, and what each kind adds.
type entry struct {
	At          time.Time `json:"at"`
	Kind        string    `json:"kind"`
	Holder      string    `json:"holder"`
	LockVersion int64     `json:"lock_version"`
	// reached
	RecoveryPoint string `json:"recovery_point"`
	// released
	Reason        string     `json:"reason"`
	Detail        string     `json:"detail"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	// taken_over
	By string `json:"by"`
	// psp_call
	PSP        string  `json:"psp"`
	Operation  string  `json:"operation"`
	PSPKey     string  `json:"psp_key"`
	Outcome    string  `json:"outcome"`
	Status     int     `json:"status"`
	DurationMS float64 `json:"duration_ms"`
	// finished
	ResponseStatus int `json:"response_status"`
}

// timelineSQL reads one key incarnation's timeline.
const timelineSQL = `
SELECT coalesce(timeline, '[]'::jsonb) FROM idempotency_keys WHERE tenant_id = $1 AND key = $2 AND created_at = $3`

// objectEventsSQL finds the events a request wrote: those about its
// object ($4) or about the key itself (request.needs_attention, whose
// object is the key, $5), written between its claim and its end ($2, $3),
// through events_tenant_created. Events carry their object only in their
// body, so the window keeps the read to the request's own life.
const objectEventsSQL = `
SELECT id, type, created_at FROM events
 WHERE tenant_id = $1 AND created_at >= $2 AND created_at <= $3
   AND (convert_from(body, 'UTF8')::jsonb #>> '{data,object,id}' = $4
        OR (convert_from(body, 'UTF8')::jsonb #>> '{data,object,object}' = 'idempotency_key'
            AND convert_from(body, 'UTF8')::jsonb #>> '{data,object,key}' = $5))
 ORDER BY created_at, id
 LIMIT 100`

// eventRef is an event and its deliveries, as the timeline and the charge
// page show them.
type eventRef struct {
	ID         string
	Type       string
	CreatedAt  time.Time
	Deliveries []webhooks.Delivery
}

func (s *Server) eventsOf(ctx context.Context, tenantID int64, objectID, key string, from, to time.Time) ([]eventRef, error) {
	rows, err := s.cfg.Pool.Query(ctx, objectEventsSQL, tenantID, from, to, objectID, key)
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", cmp.Or(objectID, key), err)
	}
	evs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (eventRef, error) {
		var e eventRef
		return e, row.Scan(&e.ID, &e.Type, &e.CreatedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("events of %s: %w", cmp.Or(objectID, key), err)
	}
	for i := range evs {
		if evs[i].Deliveries, err = webhooks.Deliveries(ctx, s.cfg.Pool, tenantID, evs[i].ID); err != nil {
			return nil, err
		}
	}
	return evs, nil
}

func (s *Server) timelineOf(ctx context.Context, id idempotency.ID, v idempotency.View) (*timelineView, error) {
	var raw []byte
	if err := s.cfg.Pool.QueryRow(ctx, timelineSQL, id.TenantID, id.Key, id.CreatedAt).Scan(&raw); err != nil {
		return nil, fmt.Errorf("timeline of %q: %w", id.Key, err)
	}
	var entries []entry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("timeline of %q: %w", id.Key, err)
	}
	end := time.Now()
	if v.CompletedAt != nil {
		// Deliveries of its events go on after it ended; a minute of them
		// is enough for the picture.
		end = v.CompletedAt.Add(time.Minute)
	}
	evs, err := s.eventsOf(ctx, id.TenantID, v.ObjectID, v.Key, v.CreatedAt, end)
	if err != nil {
		return nil, err
	}
	ongoing := v.State == idempotency.ViewInProgress || v.State == idempotency.ViewUnfinished
	return layoutTimeline(entries, evs, ongoing, time.Now()), nil
}

// Geometry of the drawing, in SVG user units (it scales to the page).
const (
	tlWidth   = 1000.0
	tlGutter  = 200.0 // lane labels
	tlRight   = 24.0
	tlTop     = 30.0 // the axis and its labels
	tlLaneH   = 56.0
	tlBarH    = 14.0
	tlMarkR   = 5.0
	tlBottomP = 8.0
)

// timelineView is a timeline laid out for the template.
type timelineView struct {
	Width, Height, Gutter, AxisY, AxisX1 float64
	Ticks                                []plot.Tick
	Lanes                                []lane
	// Rows are the entries in time order, for the table under the drawing.
	Rows []entryRow
	T0   time.Time
}

type lane struct {
	Label, Sub, Title string
	Y, H, LabelY      float64
	Held, Calls       []bar
	Marks             []mark
}

type bar struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

type mark struct {
	X, Y, LabelY float64
	Class        string
	Label, Title string
}

type entryRow struct {
	At     time.Time
	Offset string
	Lane   string
	Kind   string
	Detail string
}

// holderLabel turns "api:host:pid:run" into a lane label and its second
// line; a holder in another shape is shown as it is.
func holderLabel(h string) (label, sub string) {
	parts := strings.Split(h, ":")
	if len(parts) != 4 {
		return cmp.Or(h, "(unknown holder)"), ""
	}
	return parts[0] + " · pid " + parts[2], parts[1] + " · run " + parts[3]
}

// eventsLane names the lane of events and deliveries.
const eventsLane = "events & webhooks"

// layoutTimeline lays the entries and events out on one time axis, a lane
// per holder in the order they first appear, then the events' lane. An
// ongoing request's axis runs to now, where its current holder's hold is
// still open.
func layoutTimeline(entries []entry, evs []eventRef, ongoing bool, now time.Time) *timelineView {
	slices.SortStableFunc(entries, func(a, b entry) int { return a.At.Compare(b.At) })
	tv := &timelineView{Width: tlWidth, Gutter: tlGutter, AxisY: tlTop - 8, AxisX1: tlWidth - tlRight}
	if len(entries) == 0 && len(evs) == 0 {
		return tv
	}
	// The span of the axis.
	var t0, t1 time.Time
	see := func(t time.Time) {
		if t.IsZero() {
			return
		}
		if t0.IsZero() || t.Before(t0) {
			t0 = t
		}
		if t.After(t1) {
			t1 = t
		}
	}
	for _, e := range entries {
		see(e.At)
		if e.Kind == "psp_call" {
			see(e.At.Add(-time.Duration(e.DurationMS * float64(time.Millisecond))))
		}
	}
	for _, ev := range evs {
		see(ev.CreatedAt)
		for _, d := range ev.Deliveries {
			for _, a := range d.Attempts {
				see(a.AttemptedAt)
			}
		}
	}
	if ongoing {
		see(now)
	}
	tv.T0 = t0
	pad := max(t1.Sub(t0)/40, time.Millisecond)
	sc := plot.TimeScale{T0: t0.Add(-pad), T1: t1.Add(pad), R0: tlGutter, R1: tlWidth - tlRight}
	tv.Ticks = plot.TimeTicks(plot.TimeScale{T0: t0, T1: t1.Add(pad), R0: sc.At(t0), R1: tlWidth - tlRight}, 8)

	// Lanes, in the order their holders first appear.
	index := map[string]int{}
	laneOf := func(key, label, sub, title string) *lane {
		i, ok := index[key]
		if !ok {
			i = len(tv.Lanes)
			index[key] = i
			y := tlTop + float64(i)*tlLaneH
			tv.Lanes = append(tv.Lanes, lane{Label: label, Sub: sub, Title: title, Y: y, H: tlLaneH - 6, LabelY: y + 20})
		}
		return &tv.Lanes[i]
	}
	// Each holder's holds: from its claim or takeover to its release, its
	// finish, or the takeover by another that ended it.
	type hold struct {
		from time.Time
		open bool
	}
	holds := map[string]*hold{}
	closeHold := func(h string, at time.Time) {
		if hd := holds[h]; hd != nil && hd.open {
			l := &tv.Lanes[index[h]]
			x0, x1 := sc.At(hd.from), sc.At(at)
			class := "held"
			if strings.HasPrefix(h, "reaper:") {
				class += " reaper"
			}
			l.Held = append(l.Held, bar{X: x0, Y: l.Y + 8, W: max(x1-x0, 2), H: l.H - 16, Class: class,
				Title: "held " + plot.Duration(at.Sub(hd.from).Round(time.Millisecond))})
			hd.open = false
		}
	}
	for i, e := range entries {
		label, sub := holderLabel(e.Holder)
		l := laneOf(e.Holder, label, sub, e.Holder)
		x := sc.At(e.At)
		switch e.Kind {
		case "claimed", "taken_over":
			for other := range holds {
				if other != e.Holder {
					closeHold(other, e.At)
				}
			}
			if hd := holds[e.Holder]; hd == nil || !hd.open {
				holds[e.Holder] = &hold{from: e.At, open: true}
			}
		case "released", "finished":
			closeHold(e.Holder, e.At)
		case "psp_call":
			d := time.Duration(e.DurationMS * float64(time.Millisecond))
			x0 := sc.At(e.At.Add(-d))
			l.Calls = append(l.Calls, bar{X: x0, Y: l.Y + l.H/2 - tlBarH/2, W: max(x-x0, 3), H: tlBarH,
				Class: "psp " + e.Outcome, Title: fmt.Sprintf("%s %s at %s: %s (%d), %s", e.Operation, e.PSPKey, e.PSP, e.Outcome, e.Status, plot.Duration(d.Round(time.Millisecond)))})
		}
		if e.Kind != "psp_call" {
			// Labels alternate above and below the lane's middle, so that
			// neighbours do not print over each other.
			ly := l.Y + 6
			if i%2 == 1 {
				ly = l.Y + l.H - 1
			}
			l.Marks = append(l.Marks, mark{X: x, Y: l.Y + l.H/2, LabelY: ly, Class: e.Kind, Label: shortLabel(e), Title: describe(e)})
		}
		tv.Rows = append(tv.Rows, entryRow{At: e.At, Offset: "+" + plot.Duration(e.At.Sub(t0).Round(time.Microsecond)), Lane: label, Kind: e.Kind, Detail: describe(e)})
	}
	for h, hd := range holds {
		if hd.open && ongoing {
			closeHold(h, now)
		} else if hd.open {
			closeHold(h, t1)
		}
	}

	// Events and their deliveries.
	for _, ev := range evs {
		l := laneOf("\x00events", eventsLane, "written with the request", "")
		x := sc.At(ev.CreatedAt)
		l.Marks = append(l.Marks, mark{X: x, Y: l.Y + l.H/2, LabelY: l.Y + 6, Class: "event", Label: ev.Type, Title: ev.ID + " " + ev.Type})
		tv.Rows = append(tv.Rows, entryRow{At: ev.CreatedAt, Offset: "+" + plot.Duration(ev.CreatedAt.Sub(t0).Round(time.Microsecond)), Lane: eventsLane, Kind: "event", Detail: ev.Type + " " + ev.ID})
		for _, d := range ev.Deliveries {
			for _, a := range d.Attempts {
				class, what := "delivery failed", fmt.Sprintf("attempt %d to %s: ", a.Attempt, d.EndpointID)
				if a.StatusCode >= 200 && a.StatusCode < 300 {
					class = "delivery ok"
				}
				if a.StatusCode > 0 {
					what += fmt.Sprintf("%d in %d ms", a.StatusCode, a.LatencyMS)
				} else {
					what += cmp.Or(a.Error, "no answer")
				}
				l.Marks = append(l.Marks, mark{X: sc.At(a.AttemptedAt), Y: l.Y + l.H/2, LabelY: l.Y + l.H - 1, Class: class, Label: "", Title: what})
				tv.Rows = append(tv.Rows, entryRow{At: a.AttemptedAt, Offset: "+" + plot.Duration(a.AttemptedAt.Sub(t0).Round(time.Microsecond)), Lane: eventsLane, Kind: "delivery", Detail: ev.Type + " " + what})
			}
		}
	}
	slices.SortStableFunc(tv.Rows, func(a, b entryRow) int { return a.At.Compare(b.At) })
	tv.Height = tlTop + float64(len(tv.Lanes))*tlLaneH + tlBottomP
	return tv
}

// shortLabel is what a mark says on the drawing.
func shortLabel(e entry) string {
	switch e.Kind {
	case "reached":
		return e.RecoveryPoint
	case "taken_over":
		return "taken over (lock " + strconv.FormatInt(e.LockVersion, 10) + ")"
	case "released":
		return "released"
	case "finished":
		return "finished " + strconv.Itoa(e.ResponseStatus)
	}
	return e.Kind
}

// describe is an entry in a line, for the table and the marks' titles.
func describe(e entry) string {
	var b strings.Builder
	switch e.Kind {
	case "claimed":
		b.WriteString("claimed")
	case "reached":
		b.WriteString("reached " + e.RecoveryPoint)
	case "released":
		b.WriteString("released: " + cmp.Or(e.Reason, "no reason recorded"))
		if e.Detail != "" {
			b.WriteString(" (" + e.Detail + ")")
		}
		if e.NextAttemptAt != nil {
			b.WriteString("; next attempt " + fmtTime(*e.NextAttemptAt))
		}
	case "taken_over":
		b.WriteString("taken over by " + cmp.Or(e.By, "?"))
	case "psp_call":
		fmt.Fprintf(&b, "%s at %s (key %s): %s", cmp.Or(e.Operation, "call"), e.PSP, e.PSPKey, e.Outcome)
		if e.Status > 0 {
			fmt.Fprintf(&b, ", status %d", e.Status)
		}
		fmt.Fprintf(&b, ", %s", plot.Duration(time.Duration(e.DurationMS*float64(time.Millisecond)).Round(time.Microsecond)))
	case "finished":
		fmt.Fprintf(&b, "finished: answer %d stored", e.ResponseStatus)
	default:
		b.WriteString(e.Kind)
	}
	fmt.Fprintf(&b, " · lock_version %d", e.LockVersion)
	return b.String()
}
