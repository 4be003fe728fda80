package console

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/phasepay/phasepay/internal/console/plot"
	"github.com/phasepay/phasepay/internal/idempotency"
	"github.com/phasepay/phasepay/internal/timeline"
)

// A request's timeline, drawn: one lane per worker that held the key (its
// holder: api or reaper, host, pid, run), with the spans it held the lease,
// the recovery points it reached, its PSP calls as bars, its release or
// the takeover that ended its hold; and a lane for the events the request
// wrote and their webhook deliveries.

// timelineOf reads a request's life through package timeline (its key's
// entries, the events its transactions wrote and their delivery attempts)
// and lays it out.
func (s *Server) timelineOf(ctx context.Context, tenantID int64, v idempotency.View) (*timelineView, string, error) {
	tl, err := timeline.Read(ctx, s.cfg.Pool, tenantID, v.Key)
	if err != nil {
		return nil, "", err
	}
	ongoing := v.State == idempotency.RequestInProgress || v.State == idempotency.RequestUnfinished
	return layoutTimeline(tl.Entries, ongoing, time.Now()), tl.TraceID(), nil
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
	// lastLabel is where the last label above (0) and below (1) the
	// lane's middle ended, for placing the next one clear of them.
	lastLabel [2]float64
}

// tlLabelGap is the room a mark's label takes on the drawing: a label
// closer than this to the last one of its row goes to the other row, and
// with both taken it is left to the mark's tooltip and the table.
const tlLabelGap = 110.0

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

// layoutTimeline lays a request's life out on one time axis: a lane per
// holder in the order they first appear, then the lane of its events and
// their delivery attempts. An ongoing request's axis runs to now, where its
// current holder's hold is still open.
func layoutTimeline(entries []timeline.Entry, ongoing bool, now time.Time) *timelineView {
	tv := &timelineView{Width: tlWidth, Gutter: tlGutter, AxisY: tlTop - 8, AxisX1: tlWidth - tlRight}
	if len(entries) == 0 {
		return tv
	}
	// The span of the axis: a PSP call is recorded when it has ended (by
	// the holder's next statement), so it began its duration earlier.
	t0, t1 := entries[0].At, entries[0].At
	for _, e := range entries {
		t0, t1 = minTime(t0, e.At.Add(-callDuration(e))), maxTime(t1, e.At)
	}
	if ongoing {
		t1 = maxTime(t1, now)
	}
	tv.T0 = t0
	pad := max(t1.Sub(t0)/40, time.Millisecond)
	sc := plot.TimeScale{T0: t0.Add(-pad), T1: t1.Add(pad), R0: tlGutter, R1: tlWidth - tlRight}
	tv.Ticks = plot.TimeTicks(plot.TimeScale{T0: t0, T1: t1.Add(pad), R0: sc.At(t0), R1: tlWidth - tlRight}, 8)

	index := map[string]int{}
	laneOf := func(key, label, sub, title string) *lane {
		i, ok := index[key]
		if !ok {
			i = len(tv.Lanes)
			index[key] = i
			y := tlTop + float64(i)*tlLaneH
			tv.Lanes = append(tv.Lanes, lane{Label: label, Sub: sub, Title: title, Y: y, H: tlLaneH - 6, LabelY: y + 20,
				lastLabel: [2]float64{-tlLabelGap, -tlLabelGap}})
		}
		return &tv.Lanes[i]
	}
	// Each holder's holds: from its claim or takeover to its release, its
	// finish, or the takeover by another that ended it.
	open := map[string]time.Time{}
	closeHold := func(h string, at time.Time) {
		from, ok := open[h]
		if !ok {
			return
		}
		delete(open, h)
		l := &tv.Lanes[index[h]]
		x0, x1 := sc.At(from), sc.At(at)
		class := "held"
		if idempotency.RoleOf(h) == idempotency.RoleReaper {
			class += " reaper"
		}
		l.Held = append(l.Held, bar{X: x0, Y: l.Y + 8, W: max(x1-x0, 2), H: l.H - 16, Class: class,
			Title: "held " + plot.Duration(at.Sub(from).Round(time.Millisecond))})
	}
	for _, e := range entries {
		row := entryRow{At: e.At, Offset: "+" + plot.Duration(e.At.Sub(t0).Round(time.Microsecond)), Kind: string(e.Kind), Detail: describe(e)}
		var l *lane
		if e.Kind == timeline.KindEvent || e.Kind == timeline.KindWebhookAttempt {
			l = laneOf("\x00events", eventsLane, "written with the request", "")
		} else {
			label, sub := holderLabel(e.Holder)
			l = laneOf(e.Holder, label, sub, e.Holder)
		}
		row.Lane = l.Label
		x := sc.At(e.At)
		m := mark{X: x, Y: l.Y + l.H/2, Class: string(e.Kind), Title: describe(e)}
		switch e.Kind {
		case idempotency.KindClaimed, idempotency.KindTakenOver:
			for h, from := range open {
				if h != e.Holder && !from.After(e.At) {
					closeHold(h, e.At)
				}
			}
			if _, held := open[e.Holder]; !held {
				open[e.Holder] = e.At
			}
		case idempotency.KindReleased, idempotency.KindFinished:
			closeHold(e.Holder, e.At)
		case idempotency.KindPSPCall:
			x0 := sc.At(e.At.Add(-callDuration(e)))
			l.Calls = append(l.Calls, bar{X: x0, Y: l.Y + l.H/2 - tlBarH/2, W: max(x-x0, 3), H: tlBarH,
				Class: "psp " + e.Outcome, Title: describe(e)})
			tv.Rows = append(tv.Rows, row)
			continue
		case timeline.KindWebhookAttempt:
			m.Class = "delivery failed"
			if e.Status != nil && *e.Status >= 200 && *e.Status < 300 {
				m.Class = "delivery ok"
			}
		case timeline.KindEvent:
			m.Class = "event"
		}
		// Labels go above the lane's middle, or below it when the last one
		// above is too close, or nowhere.
		if label := shortLabel(e); label != "" {
			for r, y := range []float64{l.Y + 6, l.Y + l.H - 1} {
				if x-l.lastLabel[r] >= tlLabelGap {
					m.Label, m.LabelY, l.lastLabel[r] = label, y, x
					break
				}
			}
		}
		l.Marks = append(l.Marks, m)
		tv.Rows = append(tv.Rows, row)
	}
	for h := range open {
		if ongoing {
			closeHold(h, now)
		} else {
			closeHold(h, t1)
		}
	}
	tv.Height = tlTop + float64(len(tv.Lanes))*tlLaneH + tlBottomP
	return tv
}

func callDuration(e timeline.Entry) time.Duration {
	if e.Kind != idempotency.KindPSPCall || e.DurationMS == nil {
		return 0
	}
	return time.Duration(*e.DurationMS) * time.Millisecond
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// shortLabel is what a mark says on the drawing.
func shortLabel(e timeline.Entry) string {
	switch e.Kind {
	case idempotency.KindReached:
		return string(e.RecoveryPoint)
	case idempotency.KindTakenOver:
		return "taken over (lock " + strconv.FormatInt(e.LockVersion, 10) + ")"
	case idempotency.KindFinished:
		return "finished " + strconv.Itoa(e.ResponseStatus)
	case timeline.KindEvent:
		return e.EventType
	case timeline.KindWebhookAttempt:
		return "" // many, and close together: the table says each
	}
	return string(e.Kind)
}

// describe is an entry in a line, for the table and the marks' titles.
func describe(e timeline.Entry) string {
	var b strings.Builder
	switch e.Kind {
	case idempotency.KindClaimed:
		b.WriteString("claimed")
	case idempotency.KindReached:
		b.WriteString("reached " + string(e.RecoveryPoint))
	case idempotency.KindReleased:
		b.WriteString("released: " + cmp.Or(e.Reason, "no reason recorded"))
		if e.Detail != "" {
			b.WriteString(" (" + e.Detail + ")")
		}
		if e.NextAttemptAt != nil {
			b.WriteString("; next attempt " + fmtTime(*e.NextAttemptAt))
		} else {
			b.WriteString("; given up: needs_attention")
		}
	case idempotency.KindTakenOver:
		b.WriteString("taken over by " + cmp.Or(e.By, "?"))
	case idempotency.KindPSPCall:
		fmt.Fprintf(&b, "%s at %s (key %s): %s", cmp.Or(e.Operation, "call"), e.PSP, e.PSPKey, e.Outcome)
		if e.Status != nil {
			fmt.Fprintf(&b, ", status %d", *e.Status)
		} else {
			b.WriteString(", no answer")
		}
		fmt.Fprintf(&b, ", %s", plot.Duration(callDuration(e)))
		if e.Sends != nil && e.Lookups != nil {
			fmt.Fprintf(&b, " (%d sends, %d lookups)", *e.Sends, *e.Lookups)
		}
	case idempotency.KindFinished:
		fmt.Fprintf(&b, "finished: answer %d stored", e.ResponseStatus)
	case timeline.KindEvent:
		return e.EventType + " " + e.EventID
	case timeline.KindWebhookAttempt:
		fmt.Fprintf(&b, "%s delivery attempt %d to %s: ", e.EventType, e.Attempt, e.EndpointID)
		if e.Status != nil {
			fmt.Fprintf(&b, "%d", *e.Status)
		} else {
			b.WriteString(cmp.Or(e.Error, "no answer"))
		}
		if e.DurationMS != nil {
			fmt.Fprintf(&b, " in %d ms", *e.DurationMS)
		}
		return b.String()
	default:
		b.WriteString(string(e.Kind))
	}
	fmt.Fprintf(&b, " · lock_version %d", e.LockVersion)
	return b.String()
}
