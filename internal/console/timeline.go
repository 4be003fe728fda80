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
	// tlLabelSize is the marks' labels' font size (console.css), and
	// tlLabelGap the room kept between two labels of a row.
	tlLabelSize = 10.0
	tlLabelGap  = 6.0
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

// mark is one instant of a lane, or several the drawing cannot tell apart
// (Count), with the label placed for it, if there was room (LabelX is its
// left edge).
type mark struct {
	X, Y           float64
	LabelX, LabelY float64
	Class          string
	Label, Title   string
	Count          int
	// priority says whose label gets room first: where a hold began and
	// ended before what happened inside it.
	priority int
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
//
// A hold is drawn solid up to the last moment its holder was heard of (its
// last entry: a recovery point, a PSP call, a heartbeat), and faded from
// there to the hold's end when something else ended it: the takeover that
// followed a dead holder's lease running out, or now. A dead api's bar so
// stops where it died, not where its lease ran out.
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
			tv.Lanes = append(tv.Lanes, lane{Label: label, Sub: sub, Title: title, Y: y, H: tlLaneH - 6, LabelY: y + 20})
		}
		return &tv.Lanes[i]
	}
	// Each holder's holds: from its claim or takeover to its release, its
	// finish, or whatever ended it from outside.
	open := map[string]time.Time{}
	// heard is when each holder was last heard of; lastBeat, the mark of
	// its heartbeat when that is its last entry.
	heard := map[string]time.Time{}
	lastBeat := map[string]int{}
	closeHold := func(h string, at time.Time, endedBy string) {
		from, ok := open[h]
		if !ok {
			return
		}
		delete(open, h)
		l := &tv.Lanes[index[h]]
		class := "held"
		if idempotency.RoleOf(h) == idempotency.RoleReaper {
			class += " reaper"
		}
		until := at
		if endedBy != "" && heard[h].Before(at) && !heard[h].Before(from) {
			until = heard[h]
		}
		x0, x1, x2 := sc.At(from), sc.At(until), sc.At(at)
		l.Held = append(l.Held, bar{X: x0, Y: l.Y + 8, W: max(x1-x0, 2), H: l.H - 16, Class: class,
			Title: "held " + plot.Duration(at.Sub(from).Round(time.Millisecond))})
		if until.Before(at) {
			l.Held = append(l.Held, bar{X: x1, Y: l.Y + 8, W: max(x2-x1, 2), H: l.H - 16, Class: class + " silent",
				Title: fmt.Sprintf("no sign of life after %s: %s until %s", fmtTimeMS(until),
					plot.Duration(at.Sub(until).Round(time.Millisecond)), endedBy)})
			if i, ok := lastBeat[h]; ok {
				l.Marks[i].Label, l.Marks[i].Class, l.Marks[i].priority = "last heartbeat", l.Marks[i].Class+" last", 2
			}
		}
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
		tv.Rows = append(tv.Rows, row)
		x := sc.At(e.At)
		m := mark{X: x, Y: l.Y + l.H/2, Class: string(e.Kind), Label: shortLabel(e), Title: describe(e), Count: 1}
		switch e.Kind {
		case idempotency.KindClaimed, idempotency.KindTakenOver, idempotency.KindReleased, idempotency.KindFinished:
			m.priority = 2
		}
		switch e.Kind {
		case idempotency.KindClaimed, idempotency.KindTakenOver:
			for h, from := range open {
				if h != e.Holder && !from.After(e.At) {
					closeHold(h, e.At, "the "+cmp.Or(e.By, "next worker")+" took it over")
				}
			}
			if _, held := open[e.Holder]; !held {
				open[e.Holder] = e.At
			}
		case idempotency.KindReleased, idempotency.KindFinished:
			closeHold(e.Holder, e.At, "")
		case idempotency.KindPSPCall:
			x0 := sc.At(e.At.Add(-callDuration(e)))
			l.Calls = append(l.Calls, bar{X: x0, Y: l.Y + l.H/2 - tlBarH/2, W: max(x-x0, 3), H: tlBarH,
				Class: "psp " + e.Outcome, Title: describe(e)})
			heard[e.Holder] = maxTime(heard[e.Holder], e.At)
			delete(lastBeat, e.Holder)
			continue
		case timeline.KindWebhookAttempt:
			m.Class = "delivery failed"
			if e.Status != nil && *e.Status >= 200 && *e.Status < 300 {
				m.Class = "delivery ok"
			}
		case timeline.KindEvent:
			m.Class = "event"
		}
		if e.Holder != "" && l.Title != "" {
			heard[e.Holder] = maxTime(heard[e.Holder], e.At)
			delete(lastBeat, e.Holder)
			if e.Kind == idempotency.KindHeartbeat {
				lastBeat[e.Holder] = len(l.Marks)
			}
		}
		l.Marks = append(l.Marks, m)
	}
	for h := range open {
		if ongoing {
			closeHold(h, now, "now")
		} else {
			closeHold(h, t1, "")
		}
	}
	for i := range tv.Lanes {
		tv.Lanes[i].placeLabels()
	}
	tv.Height = tlTop + float64(len(tv.Lanes))*tlLaneH + tlBottomP
	return tv
}

// placeLabels merges the marks of the lane that fall on one spot (a claim
// and the recovery point committed with it; a takeover, its PSP call's
// answer and its finish) into one, whose label says each, and then places
// the labels above and below the lane's middle so that none is clipped at
// the drawing's edges and none overlaps another. A label with no room is
// left to the mark's tooltip and the table.
func (l *lane) placeLabels() {
	var merged []mark
	for _, m := range l.Marks {
		if n := len(merged); n > 0 && m.X-merged[n-1].X < 2*tlMarkR {
			last := &merged[n-1]
			last.Count++
			last.Title += "\n" + m.Title
			last.Class = m.Class // the latest says where it got to
			last.priority = max(last.priority, m.priority)
			if m.Label != "" {
				last.Label = strings.TrimPrefix(last.Label+" · "+m.Label, " · ")
			}
			continue
		}
		merged = append(merged, m)
	}
	l.Marks = merged
	var (
		labels   []plot.Label
		labelled []int
	)
	for i, m := range l.Marks {
		if m.Label != "" {
			labels = append(labels, plot.Label{X: m.X, Width: plot.TextWidth(m.Label, tlLabelSize), Priority: m.priority})
			labelled = append(labelled, i)
		}
	}
	for j, p := range plot.PlaceLabels(labels, tlGutter+2, tlWidth-2, 2, tlLabelGap) {
		m := &l.Marks[labelled[j]]
		if p.Row < 0 {
			m.Label = ""
			continue
		}
		m.LabelX, m.LabelY = p.Left, l.Y+6
		if p.Row == 1 {
			m.LabelY = l.Y + l.H - 1
		}
	}
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
	case idempotency.KindHeartbeat:
		return "" // only the last of a silent holder says so (layoutTimeline)
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
	case idempotency.KindHeartbeat:
		b.WriteString("renewed its lease during a slow call (the last of the run's heartbeats)")
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
